// GPU discovery through the CUDA driver API, loaded at run time. Function types come
// from the toolkit's cudaTypedefs.h (PFN_*), so a signature mistake does not compile.
// The per-context footprint is measured with two contexts: cuMemGetInfo needs a current
// context, so the free memory seen with one context is compared with the free memory
// seen after creating a second one; the difference is what one more context costs.
#include "core/gpu_inventory.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

#include "fracgpu/gpu_uuid.h"

namespace fracgpu::broker {
namespace {

constexpr unsigned kMaxGpus = 16;  // kMaxDevices of tenant_segment.h

struct DriverApi {
  void* handle = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDeviceGetCount_v2000 get_count = nullptr;
  PFN_cuDeviceGet_v2000 get = nullptr;
  PFN_cuDeviceGetName_v2000 get_name = nullptr;
  PFN_cuDeviceGetUuid_v11040 get_uuid = nullptr;
  PFN_cuDeviceTotalMem_v3020 total_mem = nullptr;
  PFN_cuCtxCreate_v3020 ctx_create = nullptr;
  PFN_cuCtxDestroy_v4000 ctx_destroy = nullptr;
  PFN_cuMemGetInfo_v3020 mem_get_info = nullptr;
};

template <class Fn>
bool resolve(void* handle, Fn& out, const char* name, const char* fallback = nullptr) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr && fallback != nullptr) sym = dlsym(handle, fallback);
  out = reinterpret_cast<Fn>(sym);
  return out != nullptr;
}

std::string choose_driver_path(const InventoryOptions& options) {
  if (!options.driver_path.empty()) return options.driver_path;
  if (const char* env = std::getenv("FRACGPU_REAL_DRIVER"); env != nullptr && *env != '\0')
    return env;
  return "libcuda.so.1";
}

Result<DriverApi> open_driver(const std::string& path) {
  DriverApi api;
  api.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.handle == nullptr) {
    const char* why = dlerror();
    return Result<DriverApi>::failure("cannot load the CUDA driver " + path + ": " +
                                      (why ? why : "unknown error"));
  }
  const bool all = resolve(api.handle, api.init, "cuInit") &&
                   resolve(api.handle, api.get_count, "cuDeviceGetCount") &&
                   resolve(api.handle, api.get, "cuDeviceGet") &&
                   resolve(api.handle, api.get_name, "cuDeviceGetName") &&
                   resolve(api.handle, api.get_uuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid") &&
                   resolve(api.handle, api.total_mem, "cuDeviceTotalMem_v2") &&
                   resolve(api.handle, api.ctx_create, "cuCtxCreate_v2") &&
                   resolve(api.handle, api.ctx_destroy, "cuCtxDestroy_v2") &&
                   resolve(api.handle, api.mem_get_info, "cuMemGetInfo_v2");
  if (!all)
    return Result<DriverApi>::failure("the CUDA driver " + path + " lacks a required entry point");
  return api;
}

std::string cu_error(const char* call, CUresult rc) {
  return std::string(call) + " failed with CUresult " + std::to_string(static_cast<int>(rc));
}

// Bytes one more context costs on `dev`; nullopt on any driver error.
std::optional<uint64_t> measure_footprint(const DriverApi& api, CUdevice dev) {
  CUcontext first = nullptr, second = nullptr;
  size_t free_one = 0, free_two = 0, total = 0;
  std::optional<uint64_t> result;
  if (api.ctx_create(&first, 0, dev) == CUDA_SUCCESS &&
      api.mem_get_info(&free_one, &total) == CUDA_SUCCESS &&
      api.ctx_create(&second, 0, dev) == CUDA_SUCCESS &&
      api.mem_get_info(&free_two, &total) == CUDA_SUCCESS) {
    result = free_one > free_two ? free_one - free_two : 0;
  }
  if (second != nullptr) api.ctx_destroy(second);
  if (first != nullptr) api.ctx_destroy(first);
  return result;
}

Result<GpuInfo> describe_gpu(const DriverApi& api, int ordinal, const InventoryOptions& options) {
  CUdevice dev = 0;
  if (CUresult rc = api.get(&dev, ordinal); rc != CUDA_SUCCESS)
    return Result<GpuInfo>::failure(cu_error("cuDeviceGet", rc));
  GpuInfo info;
  info.index = static_cast<uint32_t>(ordinal);
  char name[256] = {};
  if (api.get_name(name, sizeof name - 1, dev) == CUDA_SUCCESS) info.name = name;
  CUuuid uuid{};
  if (CUresult rc = api.get_uuid(&uuid, dev); rc != CUDA_SUCCESS)
    return Result<GpuInfo>::failure(cu_error("cuDeviceGetUuid", rc));
  info.uuid = format_gpu_uuid(uuid.bytes);
  size_t total = 0;
  if (CUresult rc = api.total_mem(&total, dev); rc != CUDA_SUCCESS)
    return Result<GpuInfo>::failure(cu_error("cuDeviceTotalMem", rc));
  info.memory_total = total;
  if (options.context_footprint) {
    info.context_footprint = *options.context_footprint;
  } else if (auto measured = measure_footprint(api, dev)) {
    info.context_footprint = *measured;
  } else {
    spdlog::warn(
        "GPU {}: could not measure the CUDA context footprint; charging 0 bytes per context",
        ordinal);
  }
  return info;
}

}  // namespace

const GpuInfo* GpuInventory::find(uint32_t index) const {
  for (const auto& g : gpus) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

GpuInventory discover_gpus(const InventoryOptions& options) {
  GpuInventory inv;
  inv.driver_path = choose_driver_path(options);
  auto api = open_driver(inv.driver_path);
  if (!api) {
    inv.problem = api.error();
    return inv;
  }
  // The driver stays loaded for the life of the broker: unloading CUDA is not supported.
  if (CUresult rc = api->init(0); rc != CUDA_SUCCESS) {
    inv.problem = cu_error("cuInit", rc) + " (driver " + inv.driver_path + ")";
    return inv;
  }
  int count = 0;
  if (CUresult rc = api->get_count(&count); rc != CUDA_SUCCESS) {
    inv.problem = cu_error("cuDeviceGetCount", rc);
    return inv;
  }
  if (count > static_cast<int>(kMaxGpus)) {
    spdlog::warn("the driver reports {} GPUs; fracgpu manages the first {}", count, kMaxGpus);
  }
  for (int i = 0; i < count && i < static_cast<int>(kMaxGpus); ++i) {
    auto gpu = describe_gpu(*api, i, options);
    if (!gpu) {
      inv.problem = "GPU " + std::to_string(i) + ": " + gpu.error();
      inv.gpus.clear();
      return inv;
    }
    inv.gpus.push_back(std::move(*gpu));
  }
  if (inv.gpus.empty()) inv.problem = "the CUDA driver " + inv.driver_path + " reports no GPU";
  return inv;
}

}  // namespace fracgpu::broker
