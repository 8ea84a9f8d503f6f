// Memory pools for stream-ordered allocation (cuMemAllocAsync & co.). A pool does not
// cache: allocations go straight to the device and frees return memory when the
// stream reaches them, so there is never cached memory for cuMemPoolTrimTo to trim and
// the device's used counter always equals what the application holds. A pool keeps the
// attributes applications set and read (release threshold, reuse flags, usage).
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>

#include "handle_registry.h"

namespace fakecuda {

class MemPool : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::MemPool;

  MemPool(uint32_t device, const CUmemPoolProps& props, bool is_default)
      : HandleObject(kKind), device_(device), props_(props), is_default_(is_default) {}

  CUmemoryPool handle() { return reinterpret_cast<CUmemoryPool>(this); }
  uint32_t device() const { return device_; }
  bool is_default() const { return is_default_; }
  const CUmemPoolProps& props() const { return props_; }

  void on_allocate(uint64_t bytes);
  void on_free(uint64_t bytes);

  CUresult set_attribute(CUmemPool_attribute attribute, const void* value);
  CUresult get_attribute(CUmemPool_attribute attribute, void* value);

 private:
  uint32_t device_;
  CUmemPoolProps props_;
  bool is_default_;
  std::mutex mutex_;
  uint64_t release_threshold_ = 0;
  int reuse_follow_event_ = 1;
  int reuse_opportunistic_ = 1;
  int reuse_internal_dependencies_ = 1;
  uint64_t used_current_ = 0;
  uint64_t used_high_ = 0;
};

}  // namespace fakecuda
