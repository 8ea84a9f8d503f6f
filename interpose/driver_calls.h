// Real driver functions the shim's policy code calls for its own purposes (device
// identity, current device, pool attributes, array sizes). Resolved once at
// initialisation from the real driver; a null entry means the driver lacks it and the
// policy falls back to a conservative behaviour. These are never the exported hooks,
// so calling them cannot re-enter the shim.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/capture_tracker.h"
#include "core/inflight_limiter.h"

namespace fracgpu::shim {

struct DriverCalls {
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceGetUuid_v11040 cuDeviceGetUuid = nullptr;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuDeviceGetMemPool_v11020 cuDeviceGetMemPool = nullptr;
  PFN_cuMemPoolGetAttribute_v11020 cuMemPoolGetAttribute = nullptr;
  PFN_cuArrayGetMemoryRequirements_v11060 cuArrayGetMemoryRequirements = nullptr;
  PFN_cuMipmappedArrayGetMemoryRequirements_v11060 cuMipmappedArrayGetMemoryRequirements = nullptr;
  PFN_cuStreamGetDevice_v12080 cuStreamGetDevice = nullptr;
  // Compute scheduling: draining a context at the end of a slice.
  PFN_cuCtxPushCurrent_v4000 cuCtxPushCurrent = nullptr;
  PFN_cuCtxPopCurrent_v4000 cuCtxPopCurrent = nullptr;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize = nullptr;
  // Graph memory (graph_memory.cpp): what an instantiated graph allocates, and what the
  // driver holds for graph allocations on a device.
  PFN_cuGraphGetNodes_v10000 cuGraphGetNodes = nullptr;
  PFN_cuGraphNodeGetType_v10000 cuGraphNodeGetType = nullptr;
  PFN_cuGraphMemAllocNodeGetParams_v11040 cuGraphMemAllocNodeGetParams = nullptr;
  PFN_cuGraphChildGraphNodeGetGraph_v10000 cuGraphChildGraphNodeGetGraph = nullptr;
  PFN_cuDeviceGetGraphMemAttribute_v11040 cuDeviceGetGraphMemAttribute = nullptr;
  PFN_cuStreamIsCapturing_v10000 cuStreamIsCapturing = nullptr;
};

void resolve_driver_calls(void* driver_handle, DriverCalls* calls);
void resolve_fence_ops(void* driver_handle, FenceOps* ops);
void resolve_capture_ops(void* driver_handle, CaptureOps* ops);

}  // namespace fracgpu::shim
