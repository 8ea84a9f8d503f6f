// ContextMemory: the device memory every CUDA context occupies of its own (hundreds of
// MiB on current GPUs), which the tenant pays for. The footprint per context is measured
// by the broker on each GPU and published in the quota; it is reserved before a context
// is created and returned when it is destroyed. A primary context is charged when this
// process first retains it on a device and returned when its last retain is released or
// it is reset: exactly the bytes charged at the first retain.
// Injected: MemoryPolicy (the ledger) and, through it, the quota's footprints and the
// DeviceResolver. Cost: context calls only (one reservation and a table row, or one
// mutex for primary retains); nothing on an allocation or launch path.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "core/allocation_table.h"
#include "core/memory_policy.h"

namespace fracgpu {

class ContextMemory {
 public:
  explicit ContextMemory(MemoryPolicy& memory) : memory_(memory) {}

  // cuCtxCreate*: `context` receives the new context.
  CUresult create(CUdevice ordinal, CUcontext* context, DriverCall call);
  // cuCtxDestroy*.
  CUresult destroy(CUcontext context, DriverCall call);
  // cuDevicePrimaryCtxRetain / Release / Reset.
  CUresult retain_primary(CUdevice ordinal, DriverCall call);
  CUresult release_primary(CUdevice ordinal, bool reset, DriverCall call);

  // Bytes charged for the primary context on `ordinal` (tests and status).
  uint64_t primary_charge(CUdevice ordinal);
  std::size_t contexts() const { return contexts_.size(); }

 private:
  struct PrimaryCharge {
    int retains = 0;
    int index = kNoTenantDevice;
    uint64_t bytes = 0;
  };
  uint64_t footprint(const TenantDevice& device);

  MemoryPolicy& memory_;
  AllocationTable contexts_;  // created contexts: their footprint
  std::mutex primary_mutex_;
  std::unordered_map<CUdevice, PrimaryCharge> primary_;
};

}  // namespace fracgpu
