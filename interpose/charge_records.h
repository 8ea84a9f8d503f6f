// Releasing what an allocation was charged, shared by the memory, pool, VMM and
// context hooks. A free takes its row out *before* the driver frees, so that another
// thread getting the same address (or handle) back at once cannot have its fresh row
// removed by us; if the driver refuses, the row goes back.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "memory_policy.h"
#include "memory_pools.h"

namespace fracgpu::shim {

template <typename Key>
uint64_t key_of(Key key) {
  if constexpr (std::is_pointer_v<Key>) return reinterpret_cast<uintptr_t>(key);
  else return static_cast<uint64_t>(key);
}

// Calls the driver's free/destroy for `key`; on success releases what `table` charged it.
template <typename Key, typename Call>
CUresult uncharged(AllocationTable MemoryPolicy::*table, Key key, Call&& call) {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (policy == nullptr) return call();
  auto charge = (policy->*table).erase(key_of(key));
  CUresult rc = call();
  if (charge && rc != CUDA_SUCCESS) (policy->*table).insert(key_of(key), *charge);
  if (charge && rc == CUDA_SUCCESS) policy->release(static_cast<int>(charge->device), charge->bytes);
  return rc;
}

// cuMemFree and cuMemFreeAsync each accept memory from cuMemAlloc* and from pools.
template <typename Call>
CUresult free_any_device_memory(CUdeviceptr ptr, Call&& call) {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (policy == nullptr) return call();
  auto plain = policy->device_memory.erase(ptr);
  auto pooled = plain ? std::nullopt : policy->async_memory.erase(ptr);
  CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    if (plain) policy->device_memory.insert(ptr, *plain);
    if (pooled) policy->async_memory.insert(ptr, *pooled);
  } else if (plain) {
    policy->release(static_cast<int>(plain->device), plain->bytes);
  } else if (pooled && !MemoryPools::instance().freed(reinterpret_cast<CUmemoryPool>(pooled->owner), pooled->bytes)) {
    policy->release(static_cast<int>(pooled->device), pooled->bytes);  // its pool is already destroyed
  }
  return rc;
}

}  // namespace fracgpu::shim
