// MemoryPools: the books of stream-ordered allocations (cuMemAllocAsync and memory
// pools). A pool keeps freed memory cached on the device, so what the tenant really
// occupies is the pool's reservation, not the sum of live allocations. Each pool is
// charged max(live bytes, bytes the driver reports reserved): a free moves bytes from
// "live" to "cached" without releasing them, an allocation first reuses cached charge,
// and the charge shrinks when the pool is trimmed, destroyed, or re-measured under
// pressure (a refused reservation or a cuMemGetInfo).
// Pure bookkeeping: every operation says what the ledger must be charged or released,
// and MemoryPolicy (the ledger's one owner) does it, so pools never call back into the
// policy. Injected: DriverCalls::cuMemPoolGetAttribute (RESERVED_MEM_CURRENT).
// Cost: one mutex and one hash-map operation per stream-ordered allocation or free; the
// driver's attribute is queried only when a pool grows, is trimmed or re-measured.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "core/driver_calls.h"

namespace fracgpu {

class MemoryPools {
 public:
  explicit MemoryPools(const DriverCalls& calls) : calls_(calls) {}

  // bytes to charge to / release from the ledger on tenant device `index` (-1: none).
  struct Change {
    int index = -1;
    uint64_t bytes = 0;
  };

  // Before the real allocation: claims `size` from the pool (on tenant device
  // `device_index` when first seen); returns what its cache cannot cover (to be charged).
  Change claim(CUmemoryPool pool, int device_index, uint64_t size);
  // The charge or the real allocation failed: undo claim(); returns what to release.
  Change unclaim(CUmemoryPool pool, uint64_t size, uint64_t charged_now);
  // After a successful allocation that grew the pool: the driver's rounding, to be
  // charged even past the grant (the memory exists already).
  Change settle(CUmemoryPool pool);
  // False when the pool is gone (destroyed with allocations outstanding): the caller
  // then releases the allocation's charge itself.
  bool freed(CUmemoryPool pool, uint64_t size);
  // Re-measures one pool / every pool of a tenant device; returns what to release.
  Change resync(CUmemoryPool pool);
  Change reclaim_cached(uint32_t device_index);
  // The driver destroys a pool only once its outstanding allocations are freed: the
  // cached part is released now; each live allocation is released by its own free.
  Change destroyed(CUmemoryPool pool);

  // The pool's books (tests and status): live bytes and bytes charged.
  uint64_t live(CUmemoryPool pool);
  uint64_t charged(CUmemoryPool pool);

 private:
  struct PoolCharge {
    int device_index = -1;
    uint64_t live = 0;     // bytes of live allocations
    uint64_t charged = 0;  // bytes charged to the tenant for this pool
  };
  uint64_t reserved_bytes(CUmemoryPool pool, bool* known) const;

  const DriverCalls& calls_;
  std::mutex mutex_;
  std::unordered_map<CUmemoryPool, PoolCharge> pools_;
};

}  // namespace fracgpu
