// Implementation of MemoryPools (see memory_pools.h). Bookkeeping under one mutex; the
// driver's attribute query happens outside it.
#include "core/memory_pools.h"

#include <algorithm>
#include <vector>

namespace fracgpu {

MemoryPools::Change MemoryPools::claim(CUmemoryPool pool, int device_index, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolCharge& charge = pools_[pool];
  if (charge.device_index < 0) charge.device_index = device_index;  // a pool lives on one device
  const uint64_t wanted = charge.live + size;
  const uint64_t charged_now = wanted > charge.charged ? wanted - charge.charged : 0;
  charge.live += size;  // claimed now so that racing threads cannot share the same cache
  charge.charged += charged_now;
  return {charge.device_index, charged_now};
}

MemoryPools::Change MemoryPools::unclaim(CUmemoryPool pool, uint64_t size, uint64_t charged_now) {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolCharge& charge = pools_[pool];
  charge.live -= size;
  charge.charged -= charged_now;
  return {charge.device_index, charged_now};
}

uint64_t MemoryPools::reserved_bytes(CUmemoryPool pool, bool* known) const {
  cuuint64_t reserved = 0;
  auto get = calls_.cuMemPoolGetAttribute;
  *known =
      get != nullptr && get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS;
  return reserved;
}

MemoryPools::Change MemoryPools::settle(CUmemoryPool pool) {
  bool known = false;
  const uint64_t reserved = reserved_bytes(pool, &known);
  if (!known) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  PoolCharge& charge = pools_[pool];
  const uint64_t extra = reserved > charge.charged ? reserved - charge.charged : 0;
  charge.charged += extra;
  return {charge.device_index, extra};
}

bool MemoryPools::freed(CUmemoryPool pool, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return false;
  it->second.live -= std::min(size, it->second.live);
  return true;
}

MemoryPools::Change MemoryPools::resync(CUmemoryPool pool) {
  bool known = false;
  const uint64_t reserved = reserved_bytes(pool, &known);
  if (!known) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return {};
  const uint64_t target = std::max(it->second.live, reserved);
  const uint64_t released = it->second.charged > target ? it->second.charged - target : 0;
  it->second.charged -= released;
  return {it->second.device_index, released};
}

MemoryPools::Change MemoryPools::reclaim_cached(uint32_t device_index) {
  std::vector<CUmemoryPool> candidates;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [pool, charge] : pools_) {
      if (charge.device_index == static_cast<int>(device_index) && charge.charged > charge.live) {
        candidates.push_back(pool);
      }
    }
  }
  Change total{static_cast<int>(device_index), 0};
  for (CUmemoryPool pool : candidates) total.bytes += resync(pool).bytes;
  return total;
}

MemoryPools::Change MemoryPools::destroyed(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return {};
  const PoolCharge charge = it->second;
  pools_.erase(it);
  return {charge.device_index, charge.charged > charge.live ? charge.charged - charge.live : 0};
}

uint64_t MemoryPools::live(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.live;
}

uint64_t MemoryPools::charged(CUmemoryPool pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? 0 : it->second.charged;
}

}  // namespace fracgpu
