// Start-up and teardown of the per-process driver state (see driver.h).
#include "driver.h"

#include <pthread.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "array.h"
#include "context.h"
#include "device_attributes.h"
#include "device_memory.h"
#include "fracgpu/gpu_uuid.h"
#include "mem_pool.h"

namespace fakecuda {
namespace {

constexpr const char* kLogPrefix = "fakecuda";

std::atomic<Driver*> g_driver{nullptr};
std::atomic<uint64_t> g_generation{1};
std::mutex g_lifecycle_mutex;

CUmemPoolProps default_pool_props(uint32_t device) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = static_cast<int>(device);
  return props;
}

// In a child forked after cuInit the parent's executor threads do not exist and its
// process slot is not ours: the child starts uninitialised (the real driver refuses
// CUDA in such a child; here a fresh cuInit gives it a driver of its own). The
// parent's copy is leaked on purpose: its mutexes may have been held at fork time.
void forget_driver_in_child() {
  g_driver.store(nullptr);
  g_generation.fetch_add(1);
}

void install_fork_handler() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, forget_driver_in_child); });
}

// CUDA_VISIBLE_DEVICES as the real driver reads it: a comma-separated list of device
// indexes or UUIDs ("GPU-" + a unique prefix of the UUID, case-insensitive); the list
// ends at the first entry that names no device or repeats one. Unset: every device.
uint32_t parse_visible_devices(const char* text, uint32_t physical_count,
                               std::array<uint32_t, kMaxDevices>& visible) {
  if (text == nullptr) {
    for (uint32_t d = 0; d < physical_count; ++d) visible[d] = d;
    return physical_count;
  }
  uint32_t count = 0;
  std::string list(text);
  size_t start = 0;
  while (start <= list.size() && count < kMaxDevices) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string entry = list.substr(start, end - start);
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front())))
      entry.erase(0, 1);
    while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back())))
      entry.pop_back();
    int found = -1;
    if (!entry.empty() && std::isdigit(static_cast<unsigned char>(entry[0]))) {
      char* rest = nullptr;
      unsigned long index = std::strtoul(entry.c_str(), &rest, 10);
      if (*rest == '\0' && index < physical_count) found = static_cast<int>(index);
    } else if (entry.size() > 4) {
      std::string lower = entry;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      for (uint32_t d = 0; d < physical_count; ++d) {
        std::string name = fracgpu::format_gpu_uuid(device_uuid(static_cast<int>(d)).bytes);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (name.compare(0, lower.size(), lower) != 0) continue;
        if (found >= 0) {  // ambiguous prefix
          found = -1;
          break;
        }
        found = static_cast<int>(d);
      }
    }
    if (found < 0) break;
    bool repeated = false;
    for (uint32_t i = 0; i < count; ++i)
      repeated = repeated || visible[i] == static_cast<uint32_t>(found);
    if (repeated) break;
    visible[count++] = static_cast<uint32_t>(found);
    start = end + 1;
  }
  return count;
}

}  // namespace

bool Driver::start(std::string& error, CUresult& failure) {
  failure = CUDA_ERROR_OPERATING_SYSTEM;
  if (!segment_.open(shared_segment_name(kLogPrefix), true, kLogPrefix, error)) return false;
  processes_ = std::make_unique<ProcessTable>(segment_.layout());
  std::optional<ProcessPlace> place =
      resolve_own_place(segment_.layout()->host_pid_ns, segment_.name(), error);
  if (!place) return false;
  place_ = *place;
  process_slot_ = processes_->register_self(place_);
  if (process_slot_ < 0) {
    error = "the shared device's process table is full";
    return false;
  }
  pid_ = processes_->slot(process_slot_).pid;
  start_time_ = processes_->slot(process_slot_).start_time;
  memory_ = std::make_unique<MemoryAccounting>(segment_.layout(), processes_.get(), process_slot_);
  mps_ = MpsClient::join(segment_.layout(), process_slot_, pid_, start_time_, &failure);
  if (failure != CUDA_SUCCESS) {
    error = "cannot join the MPS server of " + mps_pipe_directory();
    processes_->retire(process_slot_);
    return false;
  }
  visible_count_ =
      parse_visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), physical_device_count(), visible_);
  for (uint32_t device = 0; device < physical_device_count(); ++device) {
    auto pool = std::make_shared<MemPool>(device, default_pool_props(device), true);
    default_pools[device] = current_pools[device] = pool->handle();
    handles.add(pool);
  }
  return true;
}

void Driver::stop() {
  for (PrimaryContextSlot& slot : primary_contexts) {
    std::lock_guard lock(slot.mutex);
    slot.context.reset();
    slot.retain_count = 0;
  }
  for (const std::shared_ptr<Context>& context : handles.all<Context>())
    destroy_context(*this, context);
  for (const Allocation& allocation : allocations.take_if([](const Allocation&) { return true; })) {
    release_allocation(*this, allocation);
  }
  virtual_memory.release_all(memory());
  release_all_arrays(*this);
  mps_.reset();
  processes_->retire(process_slot_);
  segment_.close();
}

EngineParty Driver::engine_party(uint64_t executor_id) const {
  return EngineParty{pid_, start_time_, executor_id, place_};
}

Driver* current_driver() {
  return g_driver.load(std::memory_order_acquire);
}

uint64_t driver_generation() {
  return g_generation.load();
}

CUresult initialize_driver(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (current_driver() != nullptr) return CUDA_SUCCESS;
  install_fork_handler();
  std::lock_guard lock(g_lifecycle_mutex);
  if (current_driver() != nullptr) return CUDA_SUCCESS;
  auto driver = std::make_unique<Driver>();
  std::string error;
  CUresult failure = CUDA_SUCCESS;
  if (!driver->start(error, failure)) {
    std::fprintf(stderr, "%s: cuInit failed: %s\n", kLogPrefix, error.c_str());
    return failure;
  }
  if (driver->device_count() == 0) {  // CUDA_VISIBLE_DEVICES hides every device
    driver->stop();
    return CUDA_ERROR_NO_DEVICE;
  }
  g_driver.store(driver.release(), std::memory_order_release);
  return CUDA_SUCCESS;
}

void shutdown_driver() {
  std::lock_guard lock(g_lifecycle_mutex);
  Driver* driver = g_driver.exchange(nullptr);
  if (driver == nullptr) return;
  driver->stop();
  g_generation.fetch_add(1);
  delete driver;
}

}  // namespace fakecuda

// A real driver returns a process's device memory as the process exits, before its
// parent or a broker can observe the exit. Do the same on a normal exit; a killed
// process is swept by the next allocation that needs the room, or by a status read.
__attribute__((destructor)) static void fakecuda_release_memory_at_exit() {
  if (fakecuda::Driver* driver = fakecuda::current_driver()) driver->memory().release_all_at_exit();
}

extern "C" __attribute__((visibility("default"))) void fakecuda_shutdown() {
  fakecuda::shutdown_driver();
}
