// NvmlPort: NVML opened with dlopen, its process lists read with the infoCount protocol
// (NVML_ERROR_INSUFFICIENT_SIZE returns the count needed; the list may grow between two
// calls, so a few retries with some room to spare).
#include "core/nvml_port.h"

#include <dlfcn.h>

#include <algorithm>

namespace fracgpu::broker {
namespace {

constexpr int kListAttempts = 4;
constexpr std::size_t kInitialRoom = 64;

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(lib, name));
}

}  // namespace

std::unique_ptr<NvmlPort> NvmlPort::open(const std::string& path, std::string* reason) {
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    *reason = "cannot load NVML (" + path + "): " + (e != nullptr ? e : "dlopen failed");
    return nullptr;
  }
  std::unique_ptr<NvmlPort> port(new NvmlPort());
  port->lib_ = lib;
  auto init = symbol<nvml::InitFn>(lib, "nvmlInit_v2");
  auto count = symbol<nvml::GetCountFn>(lib, "nvmlDeviceGetCount_v2");
  auto handle = symbol<nvml::GetHandleByIndexFn>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto uuid = symbol<nvml::GetUuidFn>(lib, "nvmlDeviceGetUUID");
  port->shutdown_ = symbol<nvml::InitFn>(lib, "nvmlShutdown");
  port->compute_ =
      symbol<nvml::GetRunningProcessesFn>(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (port->compute_ == nullptr)  // drivers before R510: _v2 takes the same struct
    port->compute_ =
        symbol<nvml::GetRunningProcessesFn>(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
  port->graphics_ =
      symbol<nvml::GetRunningProcessesFn>(lib, "nvmlDeviceGetGraphicsRunningProcesses_v3");
  port->error_string_ = symbol<nvml::ErrorStringFn>(lib, "nvmlErrorString");
  port->memory_info_ = symbol<nvml::GetMemoryInfoV2Fn>(lib, "nvmlDeviceGetMemoryInfo_v2");
  port->utilization_ = symbol<NvmlGetUtilizationRatesFn>(lib, "nvmlDeviceGetUtilizationRates");
  if (init == nullptr || count == nullptr || handle == nullptr || uuid == nullptr ||
      port->compute_ == nullptr) {
    *reason = path +
              " lacks the NVML functions the audit needs (nvmlInit_v2, "
              "nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID, "
              "nvmlDeviceGetComputeRunningProcesses_v3)";
    port->shutdown_ = nullptr;  // never initialised
    return nullptr;
  }
  if (const nvml::Return rc = init(); rc != nvml::kSuccess) {
    *reason = "nvmlInit_v2 failed: " + port->describe(rc);
    port->shutdown_ = nullptr;
    return nullptr;
  }
  unsigned int n = 0;
  if (const nvml::Return rc = count(&n); rc != nvml::kSuccess) {
    *reason = "nvmlDeviceGetCount_v2 failed: " + port->describe(rc);
    return nullptr;
  }
  for (unsigned int i = 0; i < n; ++i) {
    Gpu gpu;
    char text[nvml::kUuidBufferSize] = {};
    if (handle(i, &gpu.device) != nvml::kSuccess ||
        uuid(gpu.device, text, sizeof text) != nvml::kSuccess)
      continue;  // e.g. a GPU NVML cannot open: it simply goes unaudited
    gpu.uuid = text;
    port->gpus_.push_back(std::move(gpu));
  }
  port->buffer_.resize(kInitialRoom);
  return port;
}

NvmlPort::~NvmlPort() {
  if (shutdown_ != nullptr) shutdown_();
  if (lib_ != nullptr) ::dlclose(lib_);
}

std::string NvmlPort::describe(nvml::Return rc) const {
  const char* text = error_string_ != nullptr ? error_string_(rc) : nullptr;
  return (text != nullptr ? std::string(text) : std::string("error")) + " (" + std::to_string(rc) +
         ")";
}

std::vector<std::string> NvmlPort::uuids() const {
  std::vector<std::string> out;
  for (const Gpu& g : gpus_) out.push_back(g.uuid);
  return out;
}

// Appends fn's processes to out (merging a pid already listed: a process with both a
// compute and a graphics context is reported in both lists with the same total).
bool NvmlPort::list(nvml::GetRunningProcessesFn fn, nvml::Device device, GpuUsageSample& out) {
  nvml::Return rc = nvml::kErrorUnknown;
  unsigned int count = 0;
  for (int attempt = 0; attempt < kListAttempts; ++attempt) {
    count = static_cast<unsigned int>(buffer_.size());
    rc = fn(device, &count, buffer_.data());
    if (rc != nvml::kErrorInsufficientSize) break;
    buffer_.resize(std::max<std::size_t>(count + count / 4 + 8, buffer_.size() * 2));
  }
  if (rc != nvml::kSuccess) {
    out.ok = false;
    out.error = describe(rc);
    return false;
  }
  for (unsigned int i = 0; i < count && i < buffer_.size(); ++i) {
    const nvml::ProcessInfo& info = buffer_[i];
    const bool known = info.usedGpuMemory != nvml::kValueNotAvailable;
    const auto pid = static_cast<int32_t>(info.pid);
    auto it = std::find_if(out.processes.begin(), out.processes.end(),
                           [&](const GpuProcessUsage& p) { return p.pid == pid; });
    if (it == out.processes.end()) {
      out.processes.push_back({pid, known ? info.usedGpuMemory : 0, known});
    } else if (known) {
      it->bytes = std::max<uint64_t>(it->bytes, info.usedGpuMemory);
      it->bytes_known = true;
    }
  }
  return true;
}

std::vector<GpuUsageSample> NvmlPort::sample() {
  std::vector<GpuUsageSample> samples;
  samples.reserve(gpus_.size());
  for (const Gpu& gpu : gpus_) {
    GpuUsageSample s;
    s.uuid = gpu.uuid;
    s.ok = true;
    if (list(compute_, gpu.device, s) && graphics_ != nullptr) {
      GpuUsageSample graphics = s;
      // A GPU without graphics support answers NOT_SUPPORTED: the compute list stands.
      if (list(graphics_, gpu.device, graphics)) s = std::move(graphics);
    }
    // v2: "used" without the driver's reservation, as nvidia-smi shows it (v1 includes it).
    nvml::MemoryV2 memory{};
    memory.version = nvml::kMemoryV2Version;
    if (memory_info_ != nullptr && memory_info_(gpu.device, &memory) == nvml::kSuccess)
      s.memory_used = memory.used;
    NvmlUtilization busy{};
    if (utilization_ != nullptr && utilization_(gpu.device, &busy) == nvml::kSuccess)
      s.utilization = std::min(busy.gpu, 100u) / 100.0;
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace fracgpu::broker
