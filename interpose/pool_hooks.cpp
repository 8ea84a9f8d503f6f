// Bodies of the stream-ordered allocation hooks (cuMemAllocAsync, memory pools). The
// charge model lives in MemoryPools; these bodies find the pool an allocation comes
// from (the device's current pool, or the one named) and keep the per-pointer record
// that a later free — stream-ordered or not — settles.
#include "charge_records.h"
#include "core/capture_tracker.h"
#include "hook_bodies.h"
#include "memory_policy.h"
#include "memory_pools.h"

namespace fracgpu::shim {
namespace {

// The device of a stream-ordered allocation: the current context's, else the stream's
// own (stream-ordered calls need no current context).
bool allocation_device(MemoryPolicy& policy, CUstream stream, TenantDevice* device) {
  if (policy.current_device(device)) return true;
  auto stream_device = policy.driver().cuStreamGetDevice;
  if (stream == nullptr || stream_device == nullptr || stream_device(stream, &device->ordinal) != CUDA_SUCCESS) {
    return false;
  }
  *device = policy.device(device->ordinal);
  return true;
}

// A stream-ordered allocation on a capturing stream allocates nothing: it adds a memory
// node to the graph being captured, charged when a launch of the graph backs it
// (graph_memory.h). The same holds for a free captured into a graph: the charge of the
// allocation it frees stays until the free really happens (a later free of the same
// address, or its reuse, settles the row), so the books never run short.
bool captured(CUstream stream, bool per_thread) {
  CaptureTracker& captures = CaptureTracker::process();
  if (!captures.any_open()) return false;
  return captures.surely_capturing((stream == nullptr && per_thread) ? CU_STREAM_PER_THREAD : stream);
}

template <typename Call>
CUresult pooled_allocation(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream, bool per_thread,
                           Call&& call) {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (policy == nullptr || captured(stream, per_thread)) return call();
  TenantDevice device;
  if (!allocation_device(*policy, stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;  // never uncharged
  if (pool == nullptr) {
    auto current_pool = policy->driver().cuDeviceGetMemPool;
    if (current_pool == nullptr || current_pool(&pool, device.ordinal) != CUDA_SUCCESS) pool = nullptr;
  }
  uint64_t charged_now = 0;
  MemoryPools& pools = MemoryPools::instance();
  if (CUresult rc = pools.reserve(*policy, device, pool, size, &charged_now); rc != CUDA_SUCCESS) return rc;
  CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    pools.cancel(*policy, pool, size, charged_now);
    return rc;
  }
  policy->remember(&MemoryPolicy::async_memory, *dptr,
                   {static_cast<uint32_t>(device.index), size, reinterpret_cast<uintptr_t>(pool)});
  if (charged_now > 0 && pool != nullptr) pools.settle(*policy, pool);
  return rc;
}

}  // namespace

CUresult HookBody<HookId::cuMemAllocAsync>::call(PFN_cuMemAllocAsync_v11020 real, CUdeviceptr* dptr,
                                                 size_t size, CUstream stream) noexcept {
  return pooled_allocation(dptr, size, nullptr, stream, false, [&] { return real(dptr, size, stream); });
}

CUresult HookBody<HookId::cuMemAllocAsync_ptsz>::call(PFN_cuMemAllocAsync_v11020_ptsz real, CUdeviceptr* dptr,
                                                      size_t size, CUstream stream) noexcept {
  return pooled_allocation(dptr, size, nullptr, stream, true, [&] { return real(dptr, size, stream); });
}

CUresult HookBody<HookId::cuMemAllocFromPoolAsync>::call(PFN_cuMemAllocFromPoolAsync_v11020 real,
                                                         CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                                         CUstream stream) noexcept {
  return pooled_allocation(dptr, size, pool, stream, false, [&] { return real(dptr, size, pool, stream); });
}

CUresult HookBody<HookId::cuMemAllocFromPoolAsync_ptsz>::call(PFN_cuMemAllocFromPoolAsync_v11020_ptsz real,
                                                              CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                                              CUstream stream) noexcept {
  return pooled_allocation(dptr, size, pool, stream, false, [&] { return real(dptr, size, pool, stream); });
}

CUresult HookBody<HookId::cuMemFreeAsync>::call(PFN_cuMemFreeAsync_v11020 real, CUdeviceptr ptr,
                                                CUstream stream) noexcept {
  if (captured(stream, false)) return real(ptr, stream);
  return free_any_device_memory(ptr, [&] { return real(ptr, stream); });
}

CUresult HookBody<HookId::cuMemFreeAsync_ptsz>::call(PFN_cuMemFreeAsync_v11020_ptsz real, CUdeviceptr ptr,
                                                     CUstream stream) noexcept {
  if (captured(stream, true)) return real(ptr, stream);
  return free_any_device_memory(ptr, [&] { return real(ptr, stream); });
}

CUresult HookBody<HookId::cuMemPoolTrimTo>::call(PFN_cuMemPoolTrimTo_v11020 real, CUmemoryPool pool,
                                                 size_t keep) noexcept {
  CUresult rc = real(pool, keep);
  if (rc == CUDA_SUCCESS && MemoryPolicy::active()) MemoryPools::instance().resync(*MemoryPolicy::active(), pool);
  return rc;
}

CUresult HookBody<HookId::cuMemPoolDestroy>::call(PFN_cuMemPoolDestroy_v11020 real, CUmemoryPool pool) noexcept {
  CUresult rc = real(pool);
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr) return rc;
  MemoryPools::instance().destroyed(*policy, pool);  // outstanding allocations keep their rows
  return rc;
}

}  // namespace fracgpu::shim
