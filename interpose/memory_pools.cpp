// Implementation of MemoryPools (see memory_pools.h).
#include "memory_pools.h"

#include <vector>

#include "core/shim_log.h"
#include "memory_policy.h"

namespace fracgpu::shim {

MemoryPools& MemoryPools::instance() {
  static MemoryPools* pools = new MemoryPools();  // never destroyed: usable during exit
  return *pools;
}

CUresult MemoryPools::reserve(MemoryPolicy& policy, const TenantDevice& device, CUmemoryPool pool,
                              uint64_t size, uint64_t* charged_now) {
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolCharge& charge = pools_[pool];
    if (charge.device_index < 0) charge.device_index = device.index;  // a pool lives on one device
    index = charge.device_index;
    const uint64_t wanted = charge.live + size;
    *charged_now = wanted > charge.charged ? wanted - charge.charged : 0;
    charge.live += size;  // claimed now so that racing threads cannot share the same cache
    charge.charged += *charged_now;
  }
  if (*charged_now == 0) return CUDA_SUCCESS;
  CUresult rc = policy.reserve(TenantDevice{device.ordinal, index}, *charged_now, "cuMemAllocAsync");
  if (rc != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolCharge& charge = pools_[pool];
    charge.live -= size;
    charge.charged -= *charged_now;
  }
  return rc;
}

void MemoryPools::cancel(MemoryPolicy& policy, CUmemoryPool pool, uint64_t size, uint64_t charged_now) {
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolCharge& charge = pools_[pool];
    charge.live -= size;
    charge.charged -= charged_now;
    index = charge.device_index;
  }
  policy.release(index, charged_now);
}

uint64_t MemoryPools::reserved_bytes(MemoryPolicy& policy, CUmemoryPool pool, bool* known) {
  cuuint64_t reserved = 0;
  auto get = policy.driver().cuMemPoolGetAttribute;
  *known = get != nullptr && get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS;
  return reserved;
}

void MemoryPools::settle(MemoryPolicy& policy, CUmemoryPool pool) {
  bool known = false;
  const uint64_t reserved = reserved_bytes(policy, pool, &known);
  if (!known) return;
  uint64_t extra = 0;
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    PoolCharge& charge = pools_[pool];
    if (reserved > charge.charged) extra = reserved - charge.charged;
    charge.charged += extra;
    index = charge.device_index;
  }
  if (extra == 0 || index < 0) return;
  // The memory already exists on the device: count it even past the grant, and say so.
  MemoryLedger& ledger = policy.session().ledger();
  if (ledger.try_reserve(static_cast<uint32_t>(index), extra) != ReserveOutcome::kReserved) {
    ledger.force_charge(static_cast<uint32_t>(index), extra);
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8, "memory pool rounding put %llu bytes beyond the grant",
                       static_cast<unsigned long long>(extra));
  }
}

bool MemoryPools::freed(CUmemoryPool pool, uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return false;
  it->second.live -= std::min(size, it->second.live);
  return true;
}

uint64_t MemoryPools::resync(MemoryPolicy& policy, CUmemoryPool pool) {
  bool known = false;
  const uint64_t reserved = reserved_bytes(policy, pool, &known);
  if (!known) return 0;
  uint64_t released = 0;
  int index = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool);
    if (it == pools_.end()) return 0;
    const uint64_t target = std::max(it->second.live, reserved);
    if (it->second.charged > target) released = it->second.charged - target;
    it->second.charged -= released;
    index = it->second.device_index;
  }
  policy.release(index, released);
  return released;
}

uint64_t MemoryPools::reclaim_cached(MemoryPolicy& policy, uint32_t device_index) {
  std::vector<CUmemoryPool> candidates;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [pool, charge] : pools_) {
      if (charge.device_index == static_cast<int>(device_index) && charge.charged > charge.live) {
        candidates.push_back(pool);
      }
    }
  }
  uint64_t released = 0;
  for (CUmemoryPool pool : candidates) released += resync(policy, pool);
  return released;
}

void MemoryPools::destroyed(MemoryPolicy& policy, CUmemoryPool pool) {
  PoolCharge charge;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pools_.find(pool);
    if (it == pools_.end()) return;
    charge = it->second;
    pools_.erase(it);
  }
  policy.release(charge.device_index, charge.charged > charge.live ? charge.charged - charge.live : 0);
}

}  // namespace fracgpu::shim
