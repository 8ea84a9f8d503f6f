// The moves of SwapEngine (see swap_engine.h): VMM backing of swappable allocations, the
// swap-out on the broker's demand, the swap-in at the next device-memory call, and the
// swap thread that waits for demands on the quota's swap_word.
#include "core/swap_engine.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <vector>

#include "core/context_scope.h"
#include "core/shim_log.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/monotonic_clock.h"

namespace fracgpu {
namespace {

constexpr int64_t kDemandPollNs = 200'000'000;  // also looks without a wake-up (other GPUs)
// A swap-in waiting for its grant asks again this often at most: a broker's death is seen
// within it (reserve_back).
constexpr int64_t kReserveBackStepNs = 50'000'000;

void sleep_ns(int64_t ns) {
  timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&t, nullptr);
}

// `exportable`: the physical memory may later be exported as a POSIX descriptor (what legacy
// IPC of a swappable allocation needs, core/ipc_exporter.h). Only a request at creation,
// which PyTorch's expandable segments make for every segment by default.
CUmemAllocationProp device_prop(CUdevice ordinal, bool exportable = false) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  if (exportable) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Whether the device could give `bytes` of physical memory now: created and released at
// once (only when no broker answers a swap-in, reserve_back).
bool device_has_room(const DriverCalls& calls, CUdevice ordinal, uint64_t bytes) {
  const CUmemAllocationProp prop = device_prop(ordinal);
  CUmemGenericAllocationHandle probe = 0;
  if (calls.cuMemCreate(&probe, bytes, &prop, 0) != CUDA_SUCCESS) return false;
  calls.cuMemRelease(probe);
  return true;
}

}  // namespace

void ResidencyGate::close_and_wait() noexcept {
  open_.store(false, std::memory_order_seq_cst);
  while ((calls_.load(std::memory_order_seq_cst) & 0xffffffffu) != 0) sleep_ns(20'000);
}

SwapEngine::SwapEngine(MemoryPolicy& memory, CaptureTracker& captures, const FenceOps& fence_ops)
    : memory_(memory),
      captures_(captures),
      calls_(memory.driver()),
      fence_ops_(fence_ops),
      staging_(calls_, &captures) {}

bool SwapEngine::wants(uint64_t bytes, uint64_t granule) const noexcept {
  return granule != 0 && bytes >= granule && (bytes % granule == 0 || bytes >= 8 * granule);
}

uint64_t SwapEngine::granularity(CUdevice ordinal) noexcept {
  const CUmemAllocationProp prop = device_prop(ordinal, false);
  size_t granule = 0;
  if (calls_.cuMemGetAllocationGranularity == nullptr ||
      calls_.cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
          CUDA_SUCCESS) {
    return 0;
  }
  return granule % kSwapPage == 0 ? granule : 0;  // the ledger counts host pages of kSwapPage
}

// Physical memory for `b` mapped at `va`, readable and writable by its device and by
// every device that can reach it as a peer (what cuMemAlloc memory is once peer access
// is enabled).
CUresult SwapEngine::map_physical(CUdeviceptr va, const Backed& b,
                                  CUmemGenericAllocationHandle* handle) {
  if (b.app) return map_app_physical(va, b, handle);  // as the application made it
  CUresult rc = create_physical(b, handle);
  if (rc != CUDA_SUCCESS) return rc;
  rc = calls_.cuMemMap(va, b.size, 0, *handle, 0);
  if (rc != CUDA_SUCCESS) {
    calls_.cuMemRelease(*handle);
    return rc;
  }
  CUmemAccessDesc access[kMaxDevices] = {};
  size_t n = 0;
  int count = 1;
  if (calls_.cuDeviceGetCount != nullptr) calls_.cuDeviceGetCount(&count);
  for (int d = 0; d < count && n < kMaxDevices; ++d) {
    int can = d == b.ordinal ? 1 : 0;
    if (d != b.ordinal && calls_.cuDeviceCanAccessPeer != nullptr &&
        calls_.cuDeviceCanAccessPeer(&can, d, b.ordinal) != CUDA_SUCCESS)
      can = 0;
    if (!can) continue;
    access[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[n].location.id = d;
    access[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ++n;
  }
  rc = calls_.cuMemSetAccess(va, b.size, access, n);
  if (rc != CUDA_SUCCESS) {
    calls_.cuMemUnmap(va, b.size);
    calls_.cuMemRelease(*handle);
  }
  return rc;
}

// Exportable where the device allows it (learnt from the first creation that asks: a
// driver or device without POSIX-descriptor export refuses the request, not the memory).
CUresult SwapEngine::create_physical(const Backed& b, CUmemGenericAllocationHandle* handle) {
  std::atomic<int8_t>& exportable = exportable_[b.index];
  if (exportable.load(std::memory_order_relaxed) >= 0) {
    const CUmemAllocationProp prop = device_prop(b.ordinal, true);
    const CUresult rc = calls_.cuMemCreate(handle, b.size, &prop, 0);
    if (rc == CUDA_SUCCESS) {
      exportable.store(1, std::memory_order_relaxed);
      return rc;
    }
    if (rc == CUDA_ERROR_OUT_OF_MEMORY || exportable.load(std::memory_order_relaxed) == 1)
      return rc;
    exportable.store(-1, std::memory_order_relaxed);
  }
  const CUmemAllocationProp prop = device_prop(b.ordinal, false);
  return calls_.cuMemCreate(handle, b.size, &prop, 0);
}

std::optional<CUresult> SwapEngine::allocate(const TenantDevice& device, CUdeviceptr* dptr,
                                             uint64_t bytes) {
  if (dptr == nullptr || device.index < 0 || device.index >= static_cast<int>(kMaxDevices))
    return std::nullopt;
  const TenantQuota* quota = memory_.tenant().quota();
  if (quota == nullptr ||
      quota->devices[device.index].swap_policy.load(std::memory_order_relaxed) != kSwapAllow)
    return std::nullopt;
  if (calls_.cuMemAddressReserve == nullptr || calls_.cuMemCreate == nullptr ||
      calls_.cuMemMap == nullptr || calls_.cuMemSetAccess == nullptr ||
      calls_.cuMemHostAlloc == nullptr || calls_.cuMemcpyDtoH == nullptr)
    return std::nullopt;
  uint64_t& granule = granule_[device.index];
  if (granule == 0) granule = granularity(device.ordinal);
  if (!wants(bytes, granule)) return std::nullopt;
  Backed b;
  b.index = device.index;
  b.ordinal = device.ordinal;
  b.size = (bytes + granule - 1) / granule * granule;
  if (fence_ops_.ctx_get_current != nullptr) fence_ops_.ctx_get_current(&b.context);
  if (CUresult rc = memory_.reserve(device, b.size, "cuMemAlloc"); rc != CUDA_SUCCESS) return rc;
  CUdeviceptr va = 0;
  CUresult rc = calls_.cuMemAddressReserve(&va, b.size, granule, 0, 0);
  if (rc == CUDA_SUCCESS) {
    rc = memory_.guaranteed_call(device.index, [&] { return map_physical(va, b, &b.handle); });
    if (rc != CUDA_SUCCESS) calls_.cuMemAddressFree(va, b.size);
  }
  if (rc != CUDA_SUCCESS) {
    memory_.release(device.index, b.size);
    // Out of device memory is the application's answer; anything else (no VMM support
    // here) means this allocation is simply made natively.
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) return rc;
    return std::nullopt;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    backed_[va] = b;
  }
  devices_used_.fetch_or(1u << device.index, std::memory_order_relaxed);
  ProcessSlot& slot = memory_.tenant().ledger_map()->processes[memory_.tenant().slot()];
  slot.last_active_ns.store(static_cast<uint64_t>(monotonic_ns()), std::memory_order_relaxed);
  gate_.arm();
  if (!thread_started_.exchange(true)) start_thread();
  *dptr = va;
  return CUDA_SUCCESS;
}

std::optional<CUresult> SwapEngine::free(CUdeviceptr ptr) {
  if (!gate_.armed()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = backed_.find(ptr);
  if (it == backed_.end() || it->second.app) return std::nullopt;  // app: its own cuMemUnmap
  Backed b = it->second;
  backed_.erase(it);
  if (b.pinned) {
    pinned_bytes_.fetch_sub(b.size, std::memory_order_relaxed);
    // Its export goes (later opens fail); importers' mappings keep the physical memory.
    if (SharedFreeListener* listener = share_listener_.load(std::memory_order_acquire))
      listener->shared_allocation_freed(ptr);
  }
  if (b.handle != 0) {
    // cuMemFree waits for work that may still use the memory; so does this free.
    captures_.run_unless_capturing([&] {
      ContextScope scope(calls_, b.context);
      if (calls_.cuCtxSynchronize != nullptr) calls_.cuCtxSynchronize();
    });
    calls_.cuMemUnmap(ptr, b.size);
    calls_.cuMemRelease(b.handle);
    memory_.release(b.index, b.size);
  } else {
    staging_.release(b.host);  // unregisters and unmaps each chunk
    memory_.tenant().ledger().left_host(static_cast<uint32_t>(b.index), b.size);
    swapped_bytes_.fetch_sub(b.size, std::memory_order_relaxed);
  }
  calls_.cuMemAddressFree(ptr, b.size);
  return CUDA_SUCCESS;
}

std::map<CUdeviceptr, SwapEngine::Backed>::iterator SwapEngine::containing(CUdeviceptr ptr) {
  auto it = backed_.upper_bound(ptr);
  if (it == backed_.begin()) return backed_.end();
  --it;
  return ptr - it->first < it->second.size ? it : backed_.end();
}

void SwapEngine::pin(Backed& b) noexcept {
  if (b.pinned) return;
  b.pinned = true;
  pinned_bytes_.fetch_add(b.size, std::memory_order_relaxed);
}

std::optional<CUresult> SwapEngine::pin_for_sharing(CUdeviceptr ptr,
                                                    ShareableAllocation* out) noexcept {
  if (!gate_.armed()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = containing(ptr);
  // The application's own VMM: legacy IPC is the driver's answer (it refuses VMM memory).
  if (it == backed_.end() || it->second.app) return std::nullopt;
  Backed& b = it->second;
  if (b.handle == 0) {  // on host: the other process must map the real pages
    if (!bring_back(it->first, b)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (swapped_bytes_.load(std::memory_order_relaxed) == 0) gate_.open();
  }
  pin(b);
  *out = ShareableAllocation{it->first, b.size, b.handle};
  return CUDA_SUCCESS;
}

bool SwapEngine::pin_handle(CUmemGenericAllocationHandle handle) noexcept {
  if (!gate_.armed() || handle == 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [va, b] : backed_) {
    if (b.handle != handle) continue;
    pin(b);
    return true;
  }
  return false;
}

std::size_t SwapEngine::backed_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return backed_.size();
}

// Every context this process allocated swappable memory of device `index` in: what runs
// there may use it.
void SwapEngine::synchronise(int index) noexcept {
  std::vector<CUcontext> contexts;
  for (const auto& [va, b] : backed_)
    if (b.index == index &&
        std::find(contexts.begin(), contexts.end(), b.context) == contexts.end())
      contexts.push_back(b.context);
  for (CUcontext ctx : contexts) {
    ContextScope scope(calls_, ctx);
    if (calls_.cuCtxSynchronize != nullptr) calls_.cuCtxSynchronize();
  }
}

bool SwapEngine::move_to_host(CUdeviceptr va, Backed& b) noexcept {
  ContextScope scope(calls_, b.context);
  void* host = nullptr;  // pinned and copied chunk by chunk (core/host_staging.h)
  if (staging_.copy_out(b.context, va, b.size, &host, &round_stats_) != CUDA_SUCCESS) return false;
  if (calls_.cuMemUnmap(va, b.size) != CUDA_SUCCESS) {
    staging_.release(host);
    return false;
  }
  if (!b.app || !b.app->released) calls_.cuMemRelease(b.handle);  // else the mapping held it
  b.handle = 0;
  b.host = host;
  memory_.tenant().ledger().moved_to_host(static_cast<uint32_t>(b.index), b.size);
  swapped_bytes_.fetch_add(b.size, std::memory_order_relaxed);
  return true;
}

uint64_t SwapEngine::swap_out(int index, uint64_t target) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryLedger& ledger = memory_.tenant().ledger();
  const uint32_t device = static_cast<uint32_t>(index);
  if (ledger.used(device) <= target) return 0;
  std::vector<CUdeviceptr> order;
  for (const auto& [va, b] : backed_)
    if (b.index == index && b.handle != 0 && !b.pinned) order.push_back(va);  // pinned: shared
  if (order.empty()) return 0;
  std::sort(order.begin(), order.end(),
            [&](CUdeviceptr a, CUdeviceptr c) { return backed_[a].size > backed_[c].size; });
  uint64_t moved = 0;
  const int64_t start = monotonic_ns();
  round_stats_ = CopyOutStats{};
  const bool ran = captures_.run_unless_capturing([&] {
    gate_.close_and_wait();
    synchronise(index);
    const auto& quota = memory_.tenant().quota()->devices[index];
    for (CUdeviceptr va : order) {
      if (ledger.used(device) <= target) break;
      // The broker may withdraw or change its demand meanwhile (the guarantee went away):
      // then stop moving, the swap thread looks at the new demand next.
      if (quota.resident_target.load(std::memory_order_acquire) != target) break;
      Backed& b = backed_[va];
      const bool moved_one = move_to_host(va, b);
      if (moved_one) publish_reserve_locked();  // what left the reserve is swapped now
      if (!moved_one) {
        FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8,
                           "cannot move %llu bytes at 0x%llx to host memory; they stay on the GPU",
                           static_cast<unsigned long long>(b.size),
                           static_cast<unsigned long long>(va));
        break;
      }
      moved += b.size;
    }
    if (swapped_bytes_.load(std::memory_order_relaxed) == 0) gate_.open();
  });
  if (!ran) return 0;
  publish_reserve_locked();  // after the moves were counted as swapped: never too low
  if (moved > 0) {
    staging_.set_keep_limit(moved);  // what a later swap-in may keep pinned for the next one
    log_swap_out(moved, monotonic_ns() - start);
  }
  return moved;
}

// Reserves b's bytes against the grant again (they are inside the cap already), asking
// the broker for burst; waits while it has lent them to others. Fails open like the
// compute gate (grant_gate.h) when no broker answers: a burst request that fails without
// the broker having counted it (DeviceUsage.burst_requests, which only the broker bumps,
// before it decides) means the broker is dead, stopped or gone. The bytes are then charged
// past the grant — they are inside the cap, the device has room for them (a probe) — so
// the application resumes within one wait step and one burst request (whose connect
// retries a refused connection for 200 ms) of the broker's death; the next broker
// raises the grant over what is used (guarantee_enforcer.h) and, if a guarantee needs the
// memory, asks for it again. Without room it waits for room, or for a broker: never for a
// broker that is gone. Cost while waiting: one burst request (or one refused connect())
// every kReserveBackStepNs at most.
void SwapEngine::reserve_back(const Backed& b) noexcept {
  MemoryLedger& ledger = memory_.tenant().ledger();
  const std::atomic<uint64_t>& answered =
      memory_.tenant().ledger_map()->devices[b.index].burst_requests;
  const uint32_t device = static_cast<uint32_t>(b.index);
  int64_t backoff_ns = 5'000'000;
  bool told = false, told_gone = false;
  for (;;) {
    if (ledger.try_reserve(device, b.size, true) == ReserveOutcome::kReserved) return;
    std::string error;
    const uint64_t answers = answered.load(std::memory_order_acquire);
    if (memory_.tenant().request_burst(device, b.size, &error) &&
        ledger.try_reserve(device, b.size, true) == ReserveOutcome::kReserved)
      return;
    const bool broker_gone = answered.load(std::memory_order_acquire) == answers;
    if (broker_gone && device_has_room(calls_, b.ordinal, b.size)) {
      ledger.force_charge(device, b.size);
      FRACGPU_LOG_CAPPED(LogLevel::kWarn, 4,
                         "no fracgpu broker answers (%s); tenant '%s' brings its memory back from "
                         "host without a grant",
                         error.c_str(), memory_.tenant().tenant().c_str());
      return;
    }
    if (!told || (broker_gone && !told_gone)) {
      FRACGPU_LOG(
          LogLevel::kInfo,
          "tenant '%s' waits for %.1f MiB of its memory to come back from host (%s)",
          memory_.tenant().tenant().c_str(), static_cast<double>(b.size) / (1 << 20),
          broker_gone ? "no broker answers and the GPU has no room for it yet" : error.c_str());
      told = true;
      told_gone = told_gone || broker_gone;
    }
    sleep_ns(backoff_ns);
    backoff_ns = std::min<int64_t>(backoff_ns * 2, kReserveBackStepNs);
  }
}

bool SwapEngine::bring_back(CUdeviceptr va, Backed& b) noexcept {
  ContextScope scope(calls_, b.context);
  reserve_back(b);
  CUmemGenericAllocationHandle handle = 0;
  CUresult rc;
  int64_t backoff_ns = 5'000'000;
  // The grant says the bytes are ours; the GPU may still hold a borrower's memory for
  // the moment it takes the broker to move it. Wait for it rather than fail.
  while ((rc = map_physical(va, b, &handle)) == CUDA_ERROR_OUT_OF_MEMORY) {
    sleep_ns(backoff_ns);
    backoff_ns = std::min<int64_t>(backoff_ns * 2, 100'000'000);
  }
  if (rc != CUDA_SUCCESS || staging_.copy_in(b.host, va) != CUDA_SUCCESS) {
    FRACGPU_LOG_CAPPED(LogLevel::kError, 8,
                       "cannot bring %llu bytes at 0x%llx back from host memory (CUDA error %d)",
                       static_cast<unsigned long long>(b.size), static_cast<unsigned long long>(va),
                       static_cast<int>(rc));
    if (handle != 0 && rc == CUDA_SUCCESS) {
      calls_.cuMemUnmap(va, b.size);
      if (!b.app || !b.app->released) calls_.cuMemRelease(handle);
    }
    memory_.release(b.index, b.size);
    return false;
  }
  retired_hosts_.push_back({b.host, b.size});  // freed after the gate opens (unpinning is slow)
  publish_reserve_locked();  // its reserve pieces count as reserve before they leave `swapped`
  b.host = nullptr;
  b.handle = handle;
  memory_.tenant().ledger().left_host(static_cast<uint32_t>(b.index), b.size);
  swapped_bytes_.fetch_sub(b.size, std::memory_order_relaxed);
  return true;
}

void SwapEngine::swap_in_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (gate_.is_open()) return;  // another thread did it
  const int64_t start = monotonic_ns();
  uint64_t bytes = 0;
  for (auto& [va, b] : backed_)
    if (b.handle == 0 && bring_back(va, b)) bytes += b.size;
  gate_.open();
  const double seconds = static_cast<double>(monotonic_ns() - start) / 1e9;
  FRACGPU_LOG(LogLevel::kInfo, "brought %.1f MiB back from host memory in %.3f s (%.1f GB/s)",
              static_cast<double>(bytes) / (1 << 20), seconds,
              seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0);
  // The pinned copies are unpinned by the swap thread (within kDemandPollNs), not on the
  // application's call.
}

// The entries leave retired_hosts_ only after their retirement, so that what the reserve
// gets back is never missing from a publish_reserve_locked meanwhile.
void SwapEngine::free_retired_hosts() noexcept {
  std::vector<std::pair<void*, uint64_t>> retired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    retired = retired_hosts_;
  }
  const int64_t now = monotonic_ns();
  for (const auto& [host, size] : retired) staging_.retire(host, now);  // kept or unpinned
  if (!retired.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(retired_hosts_, [&](const std::pair<void*, uint64_t>& entry) {
      return std::find(retired.begin(), retired.end(), entry) != retired.end();
    });
  }
  staging_.trim(now);
}

// One line per swap-out round: the rate, and whether pinning or the copies bounded it (a
// stall is the swap thread waiting for a chunk to be pinned, the drain its wait for the
// copies after the last chunk was queued).
void SwapEngine::log_swap_out(uint64_t moved, int64_t elapsed_ns) const noexcept {
  const CopyOutStats& s = round_stats_;
  const double seconds = static_cast<double>(elapsed_ns) / 1e9;
  FRACGPU_LOG(LogLevel::kInfo,
              "moved %.1f MiB of tenant '%s' to host memory at the broker's request in %.3f s "
              "(%.1f GB/s); staging %.3f s: pinned after %.3f s by %u threads (%.3f s of thread "
              "time, %.1f MiB reused, %.1f MiB of them the swap reserve), copies waited %.3f s "
              "for pinning and %.3f s to drain",
              static_cast<double>(moved) / (1 << 20), memory_.tenant().tenant().c_str(), seconds,
              seconds > 0 ? static_cast<double>(moved) / seconds / 1e9 : 0.0,
              static_cast<double>(s.total_ns) / 1e9, static_cast<double>(s.pin_wall_ns) / 1e9,
              s.threads, static_cast<double>(s.pin_thread_ns) / 1e9,
              static_cast<double>(s.reused_bytes) / (1 << 20),
              static_cast<double>(s.reserve_bytes) / (1 << 20),
              static_cast<double>(s.stall_ns) / 1e9, static_cast<double>(s.drain_ns) / 1e9);
}

bool SwapEngine::enter_slow() noexcept {
  while (!gate_.enter()) swap_in_all();
  return true;
}

void SwapEngine::start_thread() noexcept {
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  if (pthread_create(&thread, &attr, &SwapEngine::thread_main, this) != 0)
    FRACGPU_LOG(LogLevel::kWarn, "cannot start the swap thread; memory stays on the GPU");
  pthread_attr_destroy(&attr);
}

// Waits on the swap word of the first device with swappable memory (and looks at the
// others on every wake-up or poll), then meets each demand.
void SwapEngine::serve_demands() noexcept {
  free_retired_hosts();
  if (const uint32_t completed = gate_.completed(); completed != seen_completed_) {
    seen_completed_ = completed;  // device-memory calls since the last look: not idle
    memory_.tenant().ledger_map()->processes[memory_.tenant().slot()].last_active_ns.store(
        static_cast<uint64_t>(monotonic_ns()), std::memory_order_relaxed);
  }
  const TenantQuota* quota = memory_.tenant().quota();
  const uint32_t used = devices_used_.load(std::memory_order_relaxed);
  const int first = used != 0 ? __builtin_ctz(used) : 0;
  const uint32_t word = quota->devices[first].swap_word.load(std::memory_order_acquire);
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if ((used & (1u << d)) == 0) continue;
    const uint64_t target = quota->devices[d].resident_target.load(std::memory_order_acquire);
    if (target != kNoResidentTarget) swap_out(static_cast<int>(d), target);
  }
  if (keep_reserve()) return;  // grown by a step: the next look at once
  futex_wait_for(quota->devices[first].swap_word, word, kDemandPollNs);
}

void* SwapEngine::thread_main(void* arg) noexcept {
  auto& engine = *static_cast<SwapEngine*>(arg);
  engine.captures_.relax_this_thread();
  for (;;) engine.serve_demands();
  return nullptr;
}

void SwapEngine::after_fork_in_child() noexcept {
  // The child has no CUDA context of its parent's and no swap thread: its allocations
  // (if it ever makes any) start from scratch.
  new (&mutex_) std::mutex();
  backed_.clear();
  swapped_bytes_.store(0, std::memory_order_relaxed);
  pinned_bytes_.store(0, std::memory_order_relaxed);
  devices_used_.store(0, std::memory_order_relaxed);
  thread_started_.store(false, std::memory_order_relaxed);
  staging_.after_fork_in_child();
  gate_.open();
}

}  // namespace fracgpu
