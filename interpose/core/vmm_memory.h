// VmmMemory: the charge of virtual-memory-management allocations (PyTorch's expandable
// segments, NCCL). cuMemCreate charges the physical memory on the device named in its
// properties (host-located memory is not charged); mapping it costs nothing more. The
// driver frees it only when its handle has been released AND every mapping of it is
// gone, so a program that releases right after mapping (the documented pattern) still
// holds the memory: the charge ends at whichever of cuMemRelease / the last cuMemUnmap
// comes last. A handle whose bytes the swap engine holds on host when that happens
// (core/app_vmm.h: unmapped while swapped out) leaves the host count instead.
// Injected: MemoryPolicy (the ledger, the DeviceResolver). Cost: one reservation and a
// table row per cuMemCreate; map/unmap/release take one mutex.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/allocation_table.h"
#include "core/memory_policy.h"

namespace fracgpu {

class VmmMemory {
 public:
  explicit VmmMemory(MemoryPolicy& memory) : memory_(memory) {}

  CUresult create(CUmemGenericAllocationHandle* handle, size_t size,
                  const CUmemAllocationProp* prop, DriverCall call);
  CUresult map(CUdeviceptr ptr, CUmemGenericAllocationHandle handle, DriverCall call);
  CUresult unmap(CUdeviceptr ptr, size_t size, DriverCall call);
  CUresult release(CUmemGenericAllocationHandle handle, DriverCall call);

  // The handle's bytes are on host now (or back on the device): where its settlement takes
  // them from.
  void set_on_host(uint64_t handle, bool on_host);

  // Handles still charged (tests and status).
  std::size_t charged_handles() const { return handles_.size(); }

 private:
  struct HandleState {
    int mappings = 0;
    bool released = false;
    bool on_host = false;
  };
  void settle(uint64_t handle);  // under mutex_: the handle is done, release its charge

  MemoryPolicy& memory_;
  AllocationTable handles_;  // cuMemCreate handles -> charge
  std::mutex mutex_;
  std::unordered_map<uint64_t, HandleState> state_;  // by handle
  std::map<uint64_t, uint64_t> mappings_;            // mapped address -> handle
};

}  // namespace fracgpu
