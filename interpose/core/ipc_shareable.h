// What the IPC exporter (core/ipc_exporter.h) and the owner of the memory it shares
// (SwapEngine, core/swap_engine.h; a fake in unit tests) ask of each other:
//   - ShareableMemory::pin_for_sharing: is this pointer memory the shim backs? If so, make it
//     resident and pinned (never moved to host again: another process maps its pages) and
//     say where its physical handle is;
//   - SharedFreeListener::shared_allocation_freed: a pinned allocation was freed; its
//     export (descriptor, id) must go, so that later opens of its handle fail.
// Cost: none (interfaces).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>

namespace fracgpu {

struct ShareableAllocation {
  CUdeviceptr base = 0;
  uint64_t size = 0;                        // mapped bytes (granularity-rounded)
  CUmemGenericAllocationHandle handle = 0;  // its physical memory, exportable as a descriptor
};

class ShareableMemory {
 public:
  // nullopt: not memory the shim backs (the driver's own IPC applies). Otherwise the
  // result: CUDA_SUCCESS with *out filled and the allocation pinned, or why not.
  virtual std::optional<CUresult> pin_for_sharing(CUdeviceptr ptr,
                                                  ShareableAllocation* out) noexcept = 0;
  virtual ~ShareableMemory() = default;
};

class SharedFreeListener {
 public:
  virtual void shared_allocation_freed(CUdeviceptr base) noexcept = 0;
  virtual ~SharedFreeListener() = default;
};

}  // namespace fracgpu
