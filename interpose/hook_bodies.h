// What each wrapper does between "ask the core" and "call the driver". The primary
// template forwards unchanged; a hook that carries policy gets an explicit
// specialisation declared here (one line, its signature taken from the PFN_ typedef)
// and defined in the file for its concern: proc_address_hooks.cpp, memory_hooks.cpp,
// context_hooks.cpp, pool_hooks.cpp. Declaring them all here guarantees that
// hook_wrappers.cpp instantiates every wrapper with its real body.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/hook_catalog.h"

namespace fracgpu::shim {

template <HookId Id>
struct HookBody {
  template <typename Real, typename... Args>
  static CUresult call(Real real, Args... args) noexcept {
    return real(args...);
  }
};

// The signature of a body: the real function first, then the hook's own parameters.
template <typename Fn>
struct BodySignature;
template <typename... Args>
struct BodySignature<CUresult(CUDAAPI*)(Args...)> {
  using Type = CUresult(CUresult(CUDAAPI*)(Args...), Args...) noexcept;
};

#define FRACGPU_DECLARE_BODY(id, pfn) \
  template <>                         \
  struct HookBody<HookId::id> {       \
    static BodySignature<pfn>::Type call; \
  };

// proc_address_hooks.cpp
FRACGPU_DECLARE_BODY(cuGetProcAddress, PFN_cuGetProcAddress_v11030)
FRACGPU_DECLARE_BODY(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)

// memory_hooks.cpp, vmm_hooks.cpp
FRACGPU_DECLARE_BODY(cuMemAlloc, PFN_cuMemAlloc_v2000)
FRACGPU_DECLARE_BODY(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)
FRACGPU_DECLARE_BODY(cuMemAllocPitch, PFN_cuMemAllocPitch_v2000)
FRACGPU_DECLARE_BODY(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020)
FRACGPU_DECLARE_BODY(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000)
FRACGPU_DECLARE_BODY(cuMemFree, PFN_cuMemFree_v2000)
FRACGPU_DECLARE_BODY(cuMemFree_v2, PFN_cuMemFree_v3020)
FRACGPU_DECLARE_BODY(cuMemGetInfo, PFN_cuMemGetInfo_v2000)
FRACGPU_DECLARE_BODY(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)
FRACGPU_DECLARE_BODY(cuDeviceTotalMem, PFN_cuDeviceTotalMem_v2000)
FRACGPU_DECLARE_BODY(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)
FRACGPU_DECLARE_BODY(cuMemCreate, PFN_cuMemCreate_v10020)
FRACGPU_DECLARE_BODY(cuMemRelease, PFN_cuMemRelease_v10020)
FRACGPU_DECLARE_BODY(cuMemMap, PFN_cuMemMap_v10020)
FRACGPU_DECLARE_BODY(cuMemUnmap, PFN_cuMemUnmap_v10020)
FRACGPU_DECLARE_BODY(cuArrayCreate_v2, PFN_cuArrayCreate_v3020)
FRACGPU_DECLARE_BODY(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020)
FRACGPU_DECLARE_BODY(cuArrayDestroy, PFN_cuArrayDestroy_v2000)
FRACGPU_DECLARE_BODY(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000)
FRACGPU_DECLARE_BODY(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)

// context_hooks.cpp
FRACGPU_DECLARE_BODY(cuCtxCreate, PFN_cuCtxCreate_v2000)
FRACGPU_DECLARE_BODY(cuCtxCreate_v2, PFN_cuCtxCreate_v3020)
FRACGPU_DECLARE_BODY(cuCtxCreate_v3, PFN_cuCtxCreate_v11040)
FRACGPU_DECLARE_BODY(cuCtxCreate_v4, PFN_cuCtxCreate_v12050)
FRACGPU_DECLARE_BODY(cuCtxDestroy, PFN_cuCtxDestroy_v2000)
FRACGPU_DECLARE_BODY(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000)
FRACGPU_DECLARE_BODY(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)
FRACGPU_DECLARE_BODY(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v7000)
FRACGPU_DECLARE_BODY(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)
FRACGPU_DECLARE_BODY(cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v7000)
FRACGPU_DECLARE_BODY(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000)

// pool_hooks.cpp
FRACGPU_DECLARE_BODY(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)
FRACGPU_DECLARE_BODY(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz)
FRACGPU_DECLARE_BODY(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020)
FRACGPU_DECLARE_BODY(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz)
FRACGPU_DECLARE_BODY(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)
FRACGPU_DECLARE_BODY(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz)
FRACGPU_DECLARE_BODY(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020)
FRACGPU_DECLARE_BODY(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020)

// capture_hooks.cpp
FRACGPU_DECLARE_BODY(cuStreamBeginCapture, PFN_cuStreamBeginCapture_v10000)
FRACGPU_DECLARE_BODY(cuStreamBeginCapture_ptsz, PFN_cuStreamBeginCapture_v10000_ptsz)
FRACGPU_DECLARE_BODY(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010)
FRACGPU_DECLARE_BODY(cuStreamBeginCapture_v2_ptsz, PFN_cuStreamBeginCapture_v10010_ptsz)
FRACGPU_DECLARE_BODY(cuStreamBeginCaptureToGraph, PFN_cuStreamBeginCaptureToGraph_v12030)
FRACGPU_DECLARE_BODY(cuStreamBeginCaptureToGraph_ptsz, PFN_cuStreamBeginCaptureToGraph_v12030_ptsz)
FRACGPU_DECLARE_BODY(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)
FRACGPU_DECLARE_BODY(cuStreamEndCapture_ptsz, PFN_cuStreamEndCapture_v10000_ptsz)
FRACGPU_DECLARE_BODY(cuGraphInstantiate, PFN_cuGraphInstantiate_v10000)
FRACGPU_DECLARE_BODY(cuGraphInstantiate_v2, PFN_cuGraphInstantiate_v11000)
FRACGPU_DECLARE_BODY(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)
FRACGPU_DECLARE_BODY(cuGraphInstantiateWithParams, PFN_cuGraphInstantiateWithParams_v12000)
FRACGPU_DECLARE_BODY(cuGraphInstantiateWithParams_ptsz, PFN_cuGraphInstantiateWithParams_v12000_ptsz)
FRACGPU_DECLARE_BODY(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)
FRACGPU_DECLARE_BODY(cuGraphUpload, PFN_cuGraphUpload_v11010)
FRACGPU_DECLARE_BODY(cuGraphUpload_ptsz, PFN_cuGraphUpload_v11010_ptsz)
FRACGPU_DECLARE_BODY(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim_v11040)

#undef FRACGPU_DECLARE_BODY

}  // namespace fracgpu::shim

// launch_hooks.h: the gated hooks (kernel launches, graphs, asynchronous copies/sets).
#include "launch_hooks.h"
