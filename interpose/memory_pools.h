// MemoryPools: the charge for stream-ordered allocations (cuMemAllocAsync and memory
// pools). A pool keeps freed memory cached on the device, so what the tenant really
// occupies is the pool's reservation, not the sum of live allocations. Each pool is
// charged max(live bytes, bytes the driver reports reserved): a free moves bytes from
// "live" to "cached" without releasing them, an allocation first reuses cached charge,
// and the charge shrinks when the pool is trimmed, destroyed, or re-measured under
// pressure (a refused reservation or a cuMemGetInfo). Bookkeeping is under one mutex;
// the driver calls happen outside it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace fracgpu::shim {

class MemoryPolicy;
struct TenantDevice;

class MemoryPools {
 public:
  static MemoryPools& instance();

  // Before the real allocation: charges what the pool's cache cannot cover.
  CUresult reserve(MemoryPolicy& policy, const TenantDevice& device, CUmemoryPool pool, uint64_t size,
                   uint64_t* charged_now);
  // The real allocation failed: undo reserve().
  void cancel(MemoryPolicy& policy, CUmemoryPool pool, uint64_t size, uint64_t charged_now);
  // After a successful allocation that grew the pool: charge the driver's rounding.
  void settle(MemoryPolicy& policy, CUmemoryPool pool);
  // False when the pool is gone (destroyed with allocations outstanding): the caller
  // then releases the allocation's charge itself.
  bool freed(CUmemoryPool pool, uint64_t size);
  // Re-measures one pool / every pool of a quota device; returns bytes released.
  uint64_t resync(MemoryPolicy& policy, CUmemoryPool pool);
  uint64_t reclaim_cached(MemoryPolicy& policy, uint32_t device_index);
  // The driver destroys a pool only once its outstanding allocations are freed: release
  // the cached part now; each live allocation is released by its own free.
  void destroyed(MemoryPolicy& policy, CUmemoryPool pool);

 private:
  struct PoolCharge {
    int device_index = -1;
    uint64_t live = 0;     // bytes of live allocations
    uint64_t charged = 0;  // bytes charged to the tenant for this pool
  };
  uint64_t reserved_bytes(MemoryPolicy& policy, CUmemoryPool pool, bool* known);

  std::mutex mutex_;
  std::unordered_map<CUmemoryPool, PoolCharge> pools_;
};

}  // namespace fracgpu::shim
