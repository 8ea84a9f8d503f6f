// Pool attributes and usage statistics (see mem_pool.h). Because pools never cache,
// "reserved" memory always equals "used" memory.
#include "mem_pool.h"

#include <algorithm>
#include <cstring>

namespace fakecuda {

void MemPool::on_allocate(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  used_current_ += bytes;
  used_high_ = std::max(used_high_, used_current_);
}

void MemPool::on_free(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  used_current_ -= std::min(bytes, used_current_);
}

CUresult MemPool::set_attribute(CUmemPool_attribute attribute, const void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      std::memcpy(&reuse_follow_event_, value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      std::memcpy(&reuse_opportunistic_, value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      std::memcpy(&reuse_internal_dependencies_, value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      std::memcpy(&release_threshold_, value, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
      uint64_t reset;
      std::memcpy(&reset, value, sizeof reset);
      if (reset != 0) return CUDA_ERROR_INVALID_VALUE;  // high-water marks may only be reset
      used_high_ = used_current_;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult MemPool::get_attribute(CUmemPool_attribute attribute, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      std::memcpy(value, &reuse_follow_event_, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      std::memcpy(value, &reuse_opportunistic_, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      std::memcpy(value, &reuse_internal_dependencies_, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      std::memcpy(value, &release_threshold_, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      std::memcpy(value, &used_current_, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      std::memcpy(value, &used_high_, sizeof(uint64_t));
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace fakecuda
