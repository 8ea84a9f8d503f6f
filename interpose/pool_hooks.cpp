// Bodies of the stream-ordered allocation hooks (cuMemAllocAsync, memory pools): each is
// one call into MemoryPolicy (core/memory_policy.h), which finds the pool an allocation
// comes from, charges what its cache cannot cover (core/memory_pools.h) and keeps the
// per-pointer record that a later free — stream-ordered or not — settles. Without a
// tenant each body is a plain forward. Cost: one load on top of the policy's own.
#include "hook_bodies.h"

namespace fracgpu::shim {

CUresult HookBody<HookId::cuMemAllocAsync>::call(PFN_cuMemAllocAsync_v11020 real, CUdeviceptr* dptr,
                                                 size_t size, CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate_async(dptr, size, nullptr, stream, false,
                                      [&] { return real(dptr, size, stream); })
           : real(dptr, size, stream);
}

CUresult HookBody<HookId::cuMemAllocAsync_ptsz>::call(PFN_cuMemAllocAsync_v11020_ptsz real,
                                                      CUdeviceptr* dptr, size_t size,
                                                      CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate_async(dptr, size, nullptr, stream, true,
                                      [&] { return real(dptr, size, stream); })
           : real(dptr, size, stream);
}

CUresult HookBody<HookId::cuMemAllocFromPoolAsync>::call(PFN_cuMemAllocFromPoolAsync_v11020 real,
                                                         CUdeviceptr* dptr, size_t size,
                                                         CUmemoryPool pool,
                                                         CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate_async(dptr, size, pool, stream, false,
                                      [&] { return real(dptr, size, pool, stream); })
           : real(dptr, size, pool, stream);
}

CUresult HookBody<HookId::cuMemAllocFromPoolAsync_ptsz>::call(
    PFN_cuMemAllocFromPoolAsync_v11020_ptsz real, CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
    CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate_async(dptr, size, pool, stream, true,
                                      [&] { return real(dptr, size, pool, stream); })
           : real(dptr, size, pool, stream);
}

CUresult HookBody<HookId::cuMemFreeAsync>::call(PFN_cuMemFreeAsync_v11020 real, CUdeviceptr ptr,
                                                CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.free_async(ptr, stream, false, [&] { return real(ptr, stream); })
           : real(ptr, stream);
}

CUresult HookBody<HookId::cuMemFreeAsync_ptsz>::call(PFN_cuMemFreeAsync_v11020_ptsz real,
                                                     CUdeviceptr ptr, CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.free_async(ptr, stream, true, [&] { return real(ptr, stream); })
           : real(ptr, stream);
}

CUresult HookBody<HookId::cuMemPoolTrimTo>::call(PFN_cuMemPoolTrimTo_v11020 real, CUmemoryPool pool,
                                                 size_t keep) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.trim_pool(pool, [&] { return real(pool, keep); }) : real(pool, keep);
}

CUresult HookBody<HookId::cuMemPoolDestroy>::call(PFN_cuMemPoolDestroy_v11020 real,
                                                  CUmemoryPool pool) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.destroy_pool(pool, [&] { return real(pool); }) : real(pool);
}

}  // namespace fracgpu::shim
