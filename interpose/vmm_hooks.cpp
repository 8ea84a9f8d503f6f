// Bodies of the virtual-memory-management hooks (PyTorch's expandable segments, NCCL):
// each is one call into VmmMemory (core/vmm_memory.h), which charges cuMemCreate's
// physical memory until its handle is released and unmapped everywhere. Without a
// tenant each body is a plain forward. Cost: one load on top of VmmMemory's own.
#include "hook_bodies.h"

namespace fracgpu::shim {

CUresult HookBody<HookId::cuMemCreate>::call(PFN_cuMemCreate_v10020 real,
                                             CUmemGenericAllocationHandle* handle, size_t size,
                                             const CUmemAllocationProp* prop,
                                             unsigned long long flags) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->vmm.create(handle, size, prop, [&] { return real(handle, size, prop, flags); })
           : real(handle, size, prop, flags);
}

CUresult HookBody<HookId::cuMemMap>::call(PFN_cuMemMap_v10020 real, CUdeviceptr ptr, size_t size,
                                          size_t offset, CUmemGenericAllocationHandle handle,
                                          unsigned long long flags) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->vmm.map(ptr, handle, [&] { return real(ptr, size, offset, handle, flags); })
           : real(ptr, size, offset, handle, flags);
}

CUresult HookBody<HookId::cuMemUnmap>::call(PFN_cuMemUnmap_v10020 real, CUdeviceptr ptr,
                                            size_t size) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->vmm.unmap(ptr, size, [&] { return real(ptr, size); }) : real(ptr, size);
}

CUresult HookBody<HookId::cuMemRelease>::call(PFN_cuMemRelease_v10020 real,
                                              CUmemGenericAllocationHandle handle) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->vmm.release(handle, [&] { return real(handle); }) : real(handle);
}

}  // namespace fracgpu::shim
