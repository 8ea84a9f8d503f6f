// Test access to the fake driver the way real clients reach libcuda: dlopen of the
// built libcuda.so.1 by absolute path (FAKECUDA_LIBRARY_PATH) and dlsym of the exact
// ABI symbol names. Shared by the GoogleTest binaries and the helper child program.
// Function pointer types are the toolkit's PFN_ typedefs of the matching ABI version.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace fakecuda_test {

using PFN_fakecuda_shutdown = void (*)();

#define FAKECUDA_TEST_API(X)                                                 \
  X(cuInit, PFN_cuInit_v2000)                                                \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                        \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)                            \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030)                           \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)                        \
  X(cuGetExportTable, PFN_cuGetExportTable_v3000)                            \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                      \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                            \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                              \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                    \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)                         \
  X(cuDeviceGetUuid_v2, PFN_cuDeviceGetUuid_v11040)                          \
  X(cuDeviceGetPCIBusId, PFN_cuDeviceGetPCIBusId_v4010)                      \
  X(cuDeviceGetByPCIBusId, PFN_cuDeviceGetByPCIBusId_v4010)                  \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)            \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)      \
  X(cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000)        \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050)                                  \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000)                                 \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                              \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                              \
  X(cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000)                         \
  X(cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000)                           \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                                \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                            \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)                                     \
  X(cuMemFree_v2, PFN_cuMemFree_v3020)                                       \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)                                 \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000)                          \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020)                           \
  X(cuMemGetAddressRange_v2, PFN_cuMemGetAddressRange_v3020)                 \
  X(cuMemAllocHost_v2, PFN_cuMemAllocHost_v3020)                             \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000)                                  \
  X(cuMemcpyHtoD_v2, PFN_cuMemcpyHtoD_v3020)                                 \
  X(cuMemcpyDtoH_v2, PFN_cuMemcpyDtoH_v3020)                                 \
  X(cuMemcpyDtoD_v2, PFN_cuMemcpyDtoD_v3020)                                 \
  X(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync_v3020)                       \
  X(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync_v3020)                       \
  X(cuMemcpy2D_v2, PFN_cuMemcpy2D_v3020)                                     \
  X(cuMemsetD8_v2, PFN_cuMemsetD8_v3020)                                     \
  X(cuMemsetD32_v2, PFN_cuMemsetD32_v3020)                                   \
  X(cuMemsetD32Async, PFN_cuMemsetD32Async_v3020)                            \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)                             \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)                               \
  X(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020)         \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020)                 \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                     \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                                   \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                     \
  X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                           \
  X(cuMemMap, PFN_cuMemMap_v10020)                                           \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                       \
  X(cuMemSetAccess, PFN_cuMemSetAccess_v10020)                               \
  X(cuMemGetAllocationGranularity, PFN_cuMemGetAllocationGranularity_v10020) \
  X(cuMemExportToShareableHandle, PFN_cuMemExportToShareableHandle_v10020)   \
  X(cuIpcGetMemHandle, PFN_cuIpcGetMemHandle_v4010)                          \
  X(cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle_v4010)                        \
  X(cuIpcOpenMemHandle_v2, PFN_cuIpcOpenMemHandle_v11000)                    \
  X(cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle_v4010)                      \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020)                           \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000)                                \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000)                \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)              \
  X(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000)                  \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000)                            \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000)                                \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)                      \
  X(cuLibraryLoadData, PFN_cuLibraryLoadData_v12000)                         \
  X(cuLibraryGetKernel, PFN_cuLibraryGetKernel_v12000)                       \
  X(cuKernelGetFunction, PFN_cuKernelGetFunction_v12000)                     \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                           \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000)          \
  X(cuLaunchHostFunc, PFN_cuLaunchHostFunc_v10000)                           \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                                \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)                           \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                      \
  X(cuStreamQuery, PFN_cuStreamQuery_v2000)                                  \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020)                          \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                                  \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                                  \
  X(cuEventQuery, PFN_cuEventQuery_v2000)                                    \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)                        \
  X(cuEventElapsedTime_v2, PFN_cuEventElapsedTime_v12080)                    \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)                             \
  X(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010)                \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)                       \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)                     \
  X(cuStreamGetCaptureInfo_v3, PFN_cuStreamGetCaptureInfo_v12030)            \
  X(cuGraphCreate, PFN_cuGraphCreate_v10000)                                 \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                               \
  X(cuGraphAddKernelNode_v2, PFN_cuGraphAddKernelNode_v12000)                \
  X(cuGraphAddMemsetNode, PFN_cuGraphAddMemsetNode_v10000)                   \
  X(cuGraphGetNodes, PFN_cuGraphGetNodes_v10000)                             \
  X(cuGraphNodeGetType, PFN_cuGraphNodeGetType_v10000)                       \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)     \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                                 \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)                       \
  X(fakecuda_shutdown, PFN_fakecuda_shutdown)

struct DriverApi {
#define FAKECUDA_TEST_MEMBER(name, type) type name = nullptr;
  FAKECUDA_TEST_API(FAKECUDA_TEST_MEMBER)
#undef FAKECUDA_TEST_MEMBER

  void* handle = nullptr;

  // Looks up any exported symbol (null when the library does not export it).
  void* symbol(const char* name) const;
  // Entry points whose names are too long for the table above.
  PFN_cuMemImportFromShareableHandle_v10020 import_shareable() const {
    return reinterpret_cast<PFN_cuMemImportFromShareableHandle_v10020>(
        symbol("cuMemImportFromShareableHandle"));
  }
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 properties_from_handle() const {
    return reinterpret_cast<PFN_cuMemGetAllocationPropertiesFromHandle_v10020>(
        symbol("cuMemGetAllocationPropertiesFromHandle"));
  }
};

// The process-wide API table, loaded on first use; aborts with a message if the
// library or one of the symbols above is missing.
DriverApi& driver_api();

const char* library_path();

// "CUDA_ERROR_OUT_OF_MEMORY" etc.
std::string error_name(CUresult result);

}  // namespace fakecuda_test
