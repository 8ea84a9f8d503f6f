// The driver's own view of who holds device memory, for the usage audit (usage_audit.h):
// per GPU (by UUID) the processes with a context on it and the bytes each holds, as NVML
// reports them (nvmlDeviceGetComputeRunningProcesses_v3 + ..GraphicsRunningProcesses_v3).
// Behind a port (GpuUsagePort) so the audit is tested with fake samples; NvmlPort is the
// real one: NVML is dlopen'ed (the broker option --nvml PATH, default libnvidia-ml.so.1),
// never linked, so a node without NVML runs the broker with the audit disabled (one log
// line, "audit": {"available": false, "reason": ...} in the GPUs' status).
// Each sample also carries the GPU's used memory and utilisation where NVML has them
// (nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetUtilizationRates), for the metrics.
// Cost per sample: per GPU one process-list call (two with graphics) and the two figures,
// into a buffer kept between calls (grown only on NVML_ERROR_INSUFFICIENT_SIZE); device
// handles are looked up once at open. It runs on the broker's loop thread (a few microseconds on
// the simulated NVML; the H200 figure is in the report of issue 12).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fracgpu/nvml_types.h"

namespace fracgpu::broker {

struct GpuProcessUsage {
  int32_t pid = 0;
  uint64_t bytes = 0;
  bool bytes_known = true;  // false: NVML said NVML_VALUE_NOT_AVAILABLE
};

struct GpuUsageSample {
  std::string uuid;
  bool ok = false;    // false: this GPU could not be read this time (error says why)
  std::string error;  // set when !ok
  std::vector<GpuProcessUsage> processes;
  std::optional<uint64_t> memory_used;  // the device's used memory, bytes
  std::optional<double> utilization;    // 0..1 over NVML's last sample period
};

// nvmlUtilization_t (percent of NVML's last sample period), with the entry point's type;
// kept here rather than in fracgpu/nvml_types.h, which only the shim's types share.
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
static_assert(sizeof(NvmlUtilization) == 8);
using NvmlGetUtilizationRatesFn = nvml::Return (*)(nvml::Device, NvmlUtilization*);

class GpuUsagePort {
 public:
  virtual ~GpuUsagePort() = default;
  // One sample per GPU the port knows, in a stable order.
  virtual std::vector<GpuUsageSample> sample() = 0;
};

class NvmlPort : public GpuUsagePort {
 public:
  // Opens NVML at `path`; on failure returns nullptr and says why in *reason.
  static std::unique_ptr<NvmlPort> open(const std::string& path, std::string* reason);
  ~NvmlPort() override;
  NvmlPort(const NvmlPort&) = delete;
  NvmlPort& operator=(const NvmlPort&) = delete;

  std::vector<GpuUsageSample> sample() override;
  std::vector<std::string> uuids() const;

 private:
  NvmlPort() = default;
  bool list(nvml::GetRunningProcessesFn fn, nvml::Device device, GpuUsageSample& out);
  std::string describe(nvml::Return rc) const;

  void* lib_ = nullptr;
  nvml::InitFn shutdown_ = nullptr;
  nvml::GetRunningProcessesFn compute_ = nullptr;
  nvml::GetRunningProcessesFn graphics_ = nullptr;   // optional
  nvml::ErrorStringFn error_string_ = nullptr;       // optional
  nvml::GetMemoryInfoV2Fn memory_info_ = nullptr;    // optional
  NvmlGetUtilizationRatesFn utilization_ = nullptr;  // optional
  struct Gpu {
    std::string uuid;
    nvml::Device device = nullptr;
  };
  std::vector<Gpu> gpus_;
  std::vector<nvml::ProcessInfo> buffer_;
};

}  // namespace fracgpu::broker
