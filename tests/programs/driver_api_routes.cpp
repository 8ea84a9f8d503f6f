// The three routes into the driver, for the test client (see driver_api.h). The
// linking route refers to the driver's exported ABI names directly, so the program
// carries real undefined symbols that the dynamic linker binds.
#include <dlfcn.h>

#include <type_traits>

#include "driver_api.h"

// Declarations by exact ABI name (cuda.h would rename some of them through macros).
#define DECLARE_ABI(symbol, pfn) extern "C" std::remove_pointer_t<pfn> symbol;
DECLARE_ABI(cuInit, PFN_cuInit_v2000)
DECLARE_ABI(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)
DECLARE_ABI(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)
DECLARE_ABI(cuDeviceGet, PFN_cuDeviceGet_v2000)
DECLARE_ABI(cuDeviceGetName, PFN_cuDeviceGetName_v2000)
DECLARE_ABI(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)
DECLARE_ABI(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)
DECLARE_ABI(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)
DECLARE_ABI(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)
DECLARE_ABI(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)
DECLARE_ABI(cuMemFree_v2, PFN_cuMemFree_v3020)
DECLARE_ABI(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)
DECLARE_ABI(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD_v3020)
DECLARE_ABI(cuMemcpyHtoD_v2_ptds, PFN_cuMemcpyHtoD_v7000_ptds)
DECLARE_ABI(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH_v3020)
DECLARE_ABI(cuMemcpyDtoH_v2_ptds, PFN_cuMemcpyDtoH_v7000_ptds)
DECLARE_ABI(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync_v3020)
DECLARE_ABI(cuMemcpyHtoDAsync_v2_ptsz, PFN_cuMemcpyHtoDAsync_v7000_ptsz)
DECLARE_ABI(cuMemsetD32Async, PFN_cuMemsetD32Async_v3020)
DECLARE_ABI(cuMemsetD32Async_ptsz, PFN_cuMemsetD32Async_v7000_ptsz)
DECLARE_ABI(cuModuleLoadData, PFN_cuModuleLoadData_v2000)
DECLARE_ABI(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)
DECLARE_ABI(cuLaunchKernel, PFN_cuLaunchKernel_v4000)
DECLARE_ABI(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz)
DECLARE_ABI(cuStreamCreate, PFN_cuStreamCreate_v2000)
DECLARE_ABI(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)
DECLARE_ABI(cuStreamSynchronize_ptsz, PFN_cuStreamSynchronize_v7000_ptsz)
DECLARE_ABI(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)
DECLARE_ABI(cuEventCreate, PFN_cuEventCreate_v2000)
DECLARE_ABI(cuEventRecord, PFN_cuEventRecord_v2000)
DECLARE_ABI(cuEventRecord_ptsz, PFN_cuEventRecord_v7000_ptsz)
DECLARE_ABI(cuEventSynchronize, PFN_cuEventSynchronize_v2000)
DECLARE_ABI(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000)
DECLARE_ABI(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)
DECLARE_ABI(cuGetErrorName, PFN_cuGetErrorName_v6000)
DECLARE_ABI(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)
#undef DECLARE_ABI

namespace fracgpu::testclient {

#define CHECK_MEMBER(member) \
  if (member == nullptr) return #member;
std::string DriverApi::first_missing() const {
  // clang-format off: a statement macro per line (clang-format cannot lay the list out stably)
  CHECK_MEMBER(cuInit)
  CHECK_MEMBER(cuDriverGetVersion)
  CHECK_MEMBER(cuDeviceGetCount)
  CHECK_MEMBER(cuDeviceGet)
  CHECK_MEMBER(cuDeviceGetName)
  CHECK_MEMBER(cuDeviceTotalMem)
  CHECK_MEMBER(cuDevicePrimaryCtxRetain)
  CHECK_MEMBER(cuDevicePrimaryCtxRelease)
  CHECK_MEMBER(cuCtxSetCurrent)
  CHECK_MEMBER(cuMemAlloc)
  CHECK_MEMBER(cuMemFree)
  CHECK_MEMBER(cuMemGetInfo)
  CHECK_MEMBER(cuMemcpyHtoD)
  CHECK_MEMBER(cuMemcpyDtoH)
  CHECK_MEMBER(cuMemcpyHtoDAsync)
  CHECK_MEMBER(cuMemsetD32Async)
  CHECK_MEMBER(cuModuleLoadData)
  CHECK_MEMBER(cuModuleGetFunction)
  CHECK_MEMBER(cuLaunchKernel)
  CHECK_MEMBER(cuStreamCreate)
  CHECK_MEMBER(cuStreamSynchronize)
  CHECK_MEMBER(cuStreamDestroy)
  CHECK_MEMBER(cuEventCreate)
  CHECK_MEMBER(cuEventRecord)
  CHECK_MEMBER(cuEventSynchronize)
  CHECK_MEMBER(cuEventElapsedTime)
  CHECK_MEMBER(cuEventDestroy)
  CHECK_MEMBER(cuGetErrorName)
  // clang-format on
  return {};
}
#undef CHECK_MEMBER

std::string fill_by_linking(DriverApi* api, StreamMode mode) {
  const bool pt = mode == StreamMode::kPerThread;
  *api = DriverApi{&::cuInit,
                   &::cuDriverGetVersion,
                   &::cuDeviceGetCount,
                   &::cuDeviceGet,
                   &::cuDeviceGetName,
                   &::cuDeviceTotalMem_v2,
                   &::cuDevicePrimaryCtxRetain,
                   &::cuDevicePrimaryCtxRelease_v2,
                   &::cuCtxSetCurrent,
                   &::cuMemAlloc_v2,
                   &::cuMemFree_v2,
                   &::cuMemGetInfo_v2,
                   pt ? &::cuMemcpyHtoD_v2_ptds : &::cuMemcpyHtoD_v2,
                   pt ? &::cuMemcpyDtoH_v2_ptds : &::cuMemcpyDtoH_v2,
                   pt ? &::cuMemcpyHtoDAsync_v2_ptsz : &::cuMemcpyHtoDAsync_v2,
                   pt ? &::cuMemsetD32Async_ptsz : &::cuMemsetD32Async,
                   &::cuModuleLoadData,
                   &::cuModuleGetFunction,
                   pt ? &::cuLaunchKernel_ptsz : &::cuLaunchKernel,
                   &::cuStreamCreate,
                   pt ? &::cuStreamSynchronize_ptsz : &::cuStreamSynchronize,
                   &::cuStreamDestroy_v2,
                   &::cuEventCreate,
                   pt ? &::cuEventRecord_ptsz : &::cuEventRecord,
                   &::cuEventSynchronize,
                   &::cuEventElapsedTime,
                   &::cuEventDestroy_v2,
                   &::cuGetErrorName,
                   &::cuGetProcAddress_v2};
  return api->first_missing();
}

std::string fill_by_proc_address(DriverApi* api, StreamMode mode, int cuda_version) {
  *api = DriverApi{};
  api->cuGetProcAddress = &::cuGetProcAddress_v2;
  const cuuint64_t flags = mode == StreamMode::kPerThread
                               ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                               : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  std::string failures;
  auto get = [&](const char* base, auto* member) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found{};
    if (api->cuGetProcAddress(base, &fn, cuda_version, flags, &found) != CUDA_SUCCESS ||
        fn == nullptr) {
      failures += std::string(failures.empty() ? "" : ",") + base;
    }
    *member = reinterpret_cast<std::remove_reference_t<decltype(*member)>>(fn);
  };
  get("cuInit", &api->cuInit);
  get("cuDriverGetVersion", &api->cuDriverGetVersion);
  get("cuDeviceGetCount", &api->cuDeviceGetCount);
  get("cuDeviceGet", &api->cuDeviceGet);
  get("cuDeviceGetName", &api->cuDeviceGetName);
  get("cuDeviceTotalMem", &api->cuDeviceTotalMem);
  get("cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain);
  get("cuDevicePrimaryCtxRelease", &api->cuDevicePrimaryCtxRelease);
  get("cuCtxSetCurrent", &api->cuCtxSetCurrent);
  get("cuMemAlloc", &api->cuMemAlloc);
  get("cuMemFree", &api->cuMemFree);
  get("cuMemGetInfo", &api->cuMemGetInfo);
  get("cuMemcpyHtoD", &api->cuMemcpyHtoD);
  get("cuMemcpyDtoH", &api->cuMemcpyDtoH);
  get("cuMemcpyHtoDAsync", &api->cuMemcpyHtoDAsync);
  get("cuMemsetD32Async", &api->cuMemsetD32Async);
  get("cuModuleLoadData", &api->cuModuleLoadData);
  get("cuModuleGetFunction", &api->cuModuleGetFunction);
  get("cuLaunchKernel", &api->cuLaunchKernel);
  get("cuStreamCreate", &api->cuStreamCreate);
  get("cuStreamSynchronize", &api->cuStreamSynchronize);
  get("cuStreamDestroy", &api->cuStreamDestroy);
  get("cuEventCreate", &api->cuEventCreate);
  get("cuEventRecord", &api->cuEventRecord);
  get("cuEventSynchronize", &api->cuEventSynchronize);
  get("cuEventElapsedTime", &api->cuEventElapsedTime);
  get("cuEventDestroy", &api->cuEventDestroy);
  get("cuGetErrorName", &api->cuGetErrorName);
  return failures.empty() ? api->first_missing() : "cuGetProcAddress failed for " + failures;
}

std::string fill_by_dlopen(DriverApi* api, StreamMode mode, const std::string& library,
                           void** handle) {
  *api = DriverApi{};
  *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (*handle == nullptr) return std::string("dlopen failed: ") + dlerror();
  const bool pt = mode == StreamMode::kPerThread;
  auto get = [&](const char* symbol, auto* member) {
    *member = reinterpret_cast<std::remove_reference_t<decltype(*member)>>(dlsym(*handle, symbol));
  };
  get("cuInit", &api->cuInit);
  get("cuDriverGetVersion", &api->cuDriverGetVersion);
  get("cuDeviceGetCount", &api->cuDeviceGetCount);
  get("cuDeviceGet", &api->cuDeviceGet);
  get("cuDeviceGetName", &api->cuDeviceGetName);
  get("cuDeviceTotalMem_v2", &api->cuDeviceTotalMem);
  get("cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain);
  get("cuDevicePrimaryCtxRelease_v2", &api->cuDevicePrimaryCtxRelease);
  get("cuCtxSetCurrent", &api->cuCtxSetCurrent);
  get("cuMemAlloc_v2", &api->cuMemAlloc);
  get("cuMemFree_v2", &api->cuMemFree);
  get("cuMemGetInfo_v2", &api->cuMemGetInfo);
  get(pt ? "cuMemcpyHtoD_v2_ptds" : "cuMemcpyHtoD_v2", &api->cuMemcpyHtoD);
  get(pt ? "cuMemcpyDtoH_v2_ptds" : "cuMemcpyDtoH_v2", &api->cuMemcpyDtoH);
  get(pt ? "cuMemcpyHtoDAsync_v2_ptsz" : "cuMemcpyHtoDAsync_v2", &api->cuMemcpyHtoDAsync);
  get(pt ? "cuMemsetD32Async_ptsz" : "cuMemsetD32Async", &api->cuMemsetD32Async);
  get("cuModuleLoadData", &api->cuModuleLoadData);
  get("cuModuleGetFunction", &api->cuModuleGetFunction);
  get(pt ? "cuLaunchKernel_ptsz" : "cuLaunchKernel", &api->cuLaunchKernel);
  get("cuStreamCreate", &api->cuStreamCreate);
  get(pt ? "cuStreamSynchronize_ptsz" : "cuStreamSynchronize", &api->cuStreamSynchronize);
  get("cuStreamDestroy_v2", &api->cuStreamDestroy);
  get("cuEventCreate", &api->cuEventCreate);
  get(pt ? "cuEventRecord_ptsz" : "cuEventRecord", &api->cuEventRecord);
  get("cuEventSynchronize", &api->cuEventSynchronize);
  get("cuEventElapsedTime", &api->cuEventElapsedTime);
  get("cuEventDestroy_v2", &api->cuEventDestroy);
  get("cuGetErrorName", &api->cuGetErrorName);
  get("cuGetProcAddress_v2", &api->cuGetProcAddress);
  return api->first_missing();
}

}  // namespace fracgpu::testclient
