// The simulated NVML (libnvidia-ml.so.1): reports the simulated GPU(s) truthfully from the
// fakecuda shared segment (src/shared_segment.h), the way the real NVML reports what the
// driver knows: every simulated device (count, handles by index or UUID, the UUIDs the
// fake CUDA driver gives them), its memory (total = capacity, used = what processes hold)
// and the processes holding memory on it, per process (pid, bytes), with dead processes
// swept first (a killed process's memory is gone, as on a real GPU). Used by the shim's
// NVML-hook tests and by the broker's usage audit in CI. Declarations are fracgpu's own
// (include/fracgpu/nvml_types.h), checked against the real nvml.h on a GPU machine.
//
// Simplifications: a process is listed on a device while it holds memory there (a real
// context always does: its footprint); no graphics processes; v2 memory reports a fixed
// 256 MiB "reserved" like a driver's own reservation, kept out of v2's free and used.
// Cost: every query maps nothing new; process queries sweep the process table (one
// /proc read per live process), like `fakecuda-ctl status`.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>

#include "fracgpu/gpu_uuid.h"
#include "fracgpu/nvml_types.h"
#include "process_table.h"
#include "shared_segment.h"

namespace nvml = fracgpu::nvml;
using nvml::Device;

namespace {

constexpr unsigned long long kReserved = 256ull << 20;

struct DeviceOpaqueSlot {
  unsigned char index;
};
DeviceOpaqueSlot g_handles[fakecuda::kMaxDevices];

std::mutex g_mutex;
int g_init_count = 0;
fakecuda::SharedSegment g_segment;

// Must equal device_uuid() of the simulated CUDA driver (src/device_attributes.cpp):
// "fracgpufakegpu", a zero byte, the device index. The NVML tests compare both.
std::string device_uuid_text(uint32_t device) {
  unsigned char bytes[16] = {};
  std::memcpy(bytes, "fracgpufakegpu", 14);
  bytes[14] = 0;
  bytes[15] = static_cast<unsigned char>(device);
  return fracgpu::format_gpu_uuid(bytes);
}

fakecuda::SegmentLayout* layout() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_init_count > 0 ? g_segment.layout() : nullptr;
}

// The device index behind a handle, or -1 when it is not one of ours.
int index_of(Device device) {
  auto* slot = reinterpret_cast<DeviceOpaqueSlot*>(device);
  if (slot < g_handles || slot >= g_handles + fakecuda::kMaxDevices) return -1;
  return static_cast<int>(slot - g_handles);
}

Device handle_of(uint32_t index) {
  return reinterpret_cast<Device>(&g_handles[index]);
}

// Checks init and the handle; fills the layout and the device index.
nvml::Return resolve(Device device, fakecuda::SegmentLayout*& out, uint32_t& index) {
  out = layout();
  if (out == nullptr) return nvml::kErrorUninitialized;
  const int i = index_of(device);
  if (i < 0 || static_cast<uint32_t>(i) >= out->device_count) return nvml::kErrorInvalidArgument;
  index = static_cast<uint32_t>(i);
  return nvml::kSuccess;
}

// The infoCount protocol of nvmlDevice*RunningProcesses: *count in = room in infos, out =
// entries written (success) or needed (NVML_ERROR_INSUFFICIENT_SIZE); infos may be NULL
// only when *count is 0.
template <typename Info>
nvml::Return running_processes(Device device, unsigned int* count, Info* infos) {
  fakecuda::SegmentLayout* l = nullptr;
  uint32_t d = 0;
  if (auto r = resolve(device, l, d); r != nvml::kSuccess) return r;
  if (count == nullptr || (infos == nullptr && *count != 0)) return nvml::kErrorInvalidArgument;
  fakecuda::ProcessTable(l).sweep_dead();
  unsigned int found = 0;
  for (const fakecuda::ProcessRecord& p : l->processes) {
    if (p.state.load() != static_cast<uint32_t>(fakecuda::ProcessState::Live)) continue;
    const uint64_t bytes = p.used_bytes[d].load();
    if (bytes == 0) continue;
    if (found < *count) {
      Info info{};
      info.pid = static_cast<unsigned int>(fakecuda::reported_pid(p));  // host pid, as NVML
      info.usedGpuMemory = bytes;
      if constexpr (sizeof(Info) == sizeof(nvml::ProcessInfo)) {
        info.gpuInstanceId = 0xFFFFFFFFu;  // not in MIG mode
        info.computeInstanceId = 0xFFFFFFFFu;
      }
      infos[found] = info;
    }
    ++found;
  }
  const bool fits = found <= *count;
  *count = found;
  return fits ? nvml::kSuccess : nvml::kErrorInsufficientSize;
}

nvml::Return no_processes(Device device, unsigned int* count) {
  fakecuda::SegmentLayout* l = nullptr;
  uint32_t d = 0;
  if (auto r = resolve(device, l, d); r != nvml::kSuccess) return r;
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  *count = 0;
  return nvml::kSuccess;
}

// nvmlUtilization_t: percent of the last sample period.
struct Utilization {
  unsigned int gpu;
  unsigned int memory;
};

// Device d's busy time (DeviceRecord::busy_ns, what its engines executed) over the wall
// time since the previous call for that device, as NVML's "percent of time over the past
// sample period"; the first call covers the time since the device was first asked about.
unsigned int busy_percent(fakecuda::SegmentLayout* l, uint32_t d) {
  struct Last {
    uint64_t busy_ns = 0;
    std::chrono::steady_clock::time_point at{};
    unsigned int percent = 0;
    bool known = false;
  };
  static std::mutex mutex;
  static Last last[fakecuda::kMaxDevices];
  std::lock_guard<std::mutex> lock(mutex);
  const uint64_t busy = l->devices[d].busy_ns.load();
  const auto now = std::chrono::steady_clock::now();
  Last& p = last[d];
  if (p.known) {
    const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(now - p.at).count();
    if (wall < 1'000'000) return p.percent;  // under 1 ms: the previous figure stands
    const uint64_t spent = busy >= p.busy_ns ? busy - p.busy_ns : 0;
    p.percent = static_cast<unsigned int>(
        std::min<uint64_t>(100, spent * 100 / static_cast<uint64_t>(wall)));
  }
  p = Last{busy, now, p.percent, true};
  return p.percent;
}

// Used bytes of device d after reclaiming dead processes' memory.
uint64_t used_bytes(fakecuda::SegmentLayout* l, uint32_t d) {
  fakecuda::ProcessTable(l).sweep_dead();
  return l->devices[d].used_bytes.load();
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count == 0) {
    std::string error;
    if (!g_segment.open(fakecuda::shared_segment_name("fakenvml"), true, "fakenvml", error)) {
      return nvml::kErrorUnknown;
    }
  }
  ++g_init_count;
  return nvml::kSuccess;
}
int nvmlInit() {
  return nvmlInit_v2();
}
int nvmlInitWithFlags(unsigned int) {
  return nvmlInit_v2();
}
int nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_init_count == 0) return nvml::kErrorUninitialized;
  if (--g_init_count == 0) g_segment.close();
  return nvml::kSuccess;
}

const char* nvmlErrorString(int result) {
  switch (result) {
    case nvml::kSuccess:
      return "Success";
    case nvml::kErrorUninitialized:
      return "Uninitialized";
    case nvml::kErrorInvalidArgument:
      return "Invalid Argument";
    case nvml::kErrorNotFound:
      return "Not Found";
    case nvml::kErrorInsufficientSize:
      return "Insufficient Size";
    case nvml::kErrorArgumentVersionMismatch:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

int nvmlDeviceGetCount_v2(unsigned int* count) {
  fakecuda::SegmentLayout* l = layout();
  if (l == nullptr) return nvml::kErrorUninitialized;
  if (count == nullptr) return nvml::kErrorInvalidArgument;
  *count = l->device_count;
  return nvml::kSuccess;
}
int nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, Device* device) {
  fakecuda::SegmentLayout* l = layout();
  if (l == nullptr) return nvml::kErrorUninitialized;
  if (index >= l->device_count || device == nullptr) return nvml::kErrorInvalidArgument;
  *device = handle_of(index);
  return nvml::kSuccess;
}
int nvmlDeviceGetHandleByIndex(unsigned int index, Device* device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

int nvmlDeviceGetHandleByUUID(const char* uuid, Device* device) {
  fakecuda::SegmentLayout* l = layout();
  if (l == nullptr) return nvml::kErrorUninitialized;
  if (uuid == nullptr || device == nullptr) return nvml::kErrorInvalidArgument;
  for (uint32_t d = 0; d < l->device_count; ++d) {
    if (device_uuid_text(d) == uuid) {
      *device = handle_of(d);
      return nvml::kSuccess;
    }
  }
  return nvml::kErrorNotFound;
}

int nvmlDeviceGetUUID(Device device, char* uuid, unsigned int length) {
  fakecuda::SegmentLayout* l = nullptr;
  uint32_t d = 0;
  if (auto r = resolve(device, l, d); r != nvml::kSuccess) return r;
  const std::string text = device_uuid_text(d);
  if (uuid == nullptr) return nvml::kErrorInvalidArgument;
  if (length < text.size() + 1) return nvml::kErrorInsufficientSize;
  std::memcpy(uuid, text.c_str(), text.size() + 1);
  return nvml::kSuccess;
}

int nvmlDeviceGetUtilizationRates(Device device, Utilization* utilization) {
  fakecuda::SegmentLayout* l = nullptr;
  uint32_t d = 0;
  if (auto r = resolve(device, l, d); r != nvml::kSuccess) return r;
  if (utilization == nullptr) return nvml::kErrorInvalidArgument;
  utilization->gpu = busy_percent(l, d);
  utilization->memory = 0;  // the simulated GPU has no memory-controller figure
  return nvml::kSuccess;
}

int nvmlDeviceGetMemoryInfo(Device device, nvml::Memory* memory) {
  fakecuda::SegmentLayout* l = nullptr;
  uint32_t d = 0;
  if (auto r = resolve(device, l, d); r != nvml::kSuccess) return r;
  if (memory == nullptr) return nvml::kErrorInvalidArgument;
  const uint64_t total = l->devices[d].capacity_bytes;
  const uint64_t used = std::min<uint64_t>(used_bytes(l, d), total);
  *memory = nvml::Memory{total, total - used, used};
  return nvml::kSuccess;
}

int nvmlDeviceGetMemoryInfo_v2(Device device, nvml::MemoryV2* memory) {
  fakecuda::SegmentLayout* l = nullptr;
  uint32_t d = 0;
  if (auto r = resolve(device, l, d); r != nvml::kSuccess) return r;
  if (memory == nullptr) return nvml::kErrorInvalidArgument;
  if (memory->version != nvml::kMemoryV2Version) return nvml::kErrorArgumentVersionMismatch;
  const uint64_t total = l->devices[d].capacity_bytes;
  const uint64_t reserved = std::min<uint64_t>(kReserved, total);
  const uint64_t used = std::min<uint64_t>(used_bytes(l, d), total - reserved);
  memory->total = total;
  memory->reserved = reserved;
  memory->used = used;
  memory->free = total - reserved - used;
  return nvml::kSuccess;
}

int nvmlDeviceGetComputeRunningProcesses_v3(Device device, unsigned int* count,
                                            nvml::ProcessInfo* infos) {
  return running_processes(device, count, infos);
}
int nvmlDeviceGetComputeRunningProcesses_v2(Device device, unsigned int* count,
                                            nvml::ProcessInfo* infos) {
  return running_processes(device, count, infos);
}
int nvmlDeviceGetComputeRunningProcesses(Device device, unsigned int* count,
                                         nvml::ProcessInfoV1* infos) {
  return running_processes(device, count, infos);
}

int nvmlDeviceGetGraphicsRunningProcesses_v3(Device device, unsigned int* count,
                                             nvml::ProcessInfo*) {
  return no_processes(device, count);
}
int nvmlDeviceGetGraphicsRunningProcesses_v2(Device device, unsigned int* count,
                                             nvml::ProcessInfo*) {
  return no_processes(device, count);
}

}  // extern "C"
