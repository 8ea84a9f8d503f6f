// Bodies of the virtual-memory-management hooks (PyTorch's expandable segments, NCCL):
// each is one call into AppVmm (core/app_vmm.h), which translates the application's
// handles (virtual once its memory can move to host) and hands the charge to VmmMemory
// (core/vmm_memory.h: cuMemCreate's physical memory is charged until its handle is
// released and unmapped everywhere). Without a tenant each body is a plain forward.
// Cost: one load on top of AppVmm's own (one relaxed load for a tenant that never swaps).
#include "hook_bodies.h"

namespace fracgpu::shim {

CUresult HookBody<HookId::cuMemCreate>::call(PFN_cuMemCreate_v10020 real,
                                             CUmemGenericAllocationHandle* handle, size_t size,
                                             const CUmemAllocationProp* prop,
                                             unsigned long long flags) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.create(handle, size, prop, flags, real) : real(handle, size, prop, flags);
}

CUresult HookBody<HookId::cuMemMap>::call(PFN_cuMemMap_v10020 real, CUdeviceptr ptr, size_t size,
                                          size_t offset, CUmemGenericAllocationHandle handle,
                                          unsigned long long flags) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.map(ptr, size, offset, handle, flags, real)
           : real(ptr, size, offset, handle, flags);
}

CUresult HookBody<HookId::cuMemUnmap>::call(PFN_cuMemUnmap_v10020 real, CUdeviceptr ptr,
                                            size_t size) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.unmap(ptr, size, real) : real(ptr, size);
}

CUresult HookBody<HookId::cuMemRelease>::call(PFN_cuMemRelease_v10020 real,
                                              CUmemGenericAllocationHandle handle) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.release(handle, real) : real(handle);
}

CUresult HookBody<HookId::cuMemSetAccess>::call(PFN_cuMemSetAccess_v10020 real, CUdeviceptr ptr,
                                                size_t size, const CUmemAccessDesc* desc,
                                                size_t count) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.set_access(ptr, size, desc, count, real) : real(ptr, size, desc, count);
}

CUresult HookBody<HookId::cuMemRetainAllocationHandle>::call(
    PFN_cuMemRetainAllocationHandle_v11000 real, CUmemGenericAllocationHandle* handle,
    void* addr) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.retain(handle, addr, real) : real(handle, addr);
}

CUresult HookBody<HookId::cuMemGetAllocationPropertiesFromHandle>::call(
    PFN_cuMemGetAllocationPropertiesFromHandle_v10020 real, CUmemAllocationProp* prop,
    CUmemGenericAllocationHandle handle) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.properties(prop, handle, real) : real(prop, handle);
}

CUresult HookBody<HookId::cuMemImportFromShareableHandle>::call(
    PFN_cuMemImportFromShareableHandle_v10020 real, CUmemGenericAllocationHandle* handle,
    void* os_handle, CUmemAllocationHandleType type) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->app_vmm.import(handle, os_handle, type, real) : real(handle, os_handle, type);
}

}  // namespace fracgpu::shim
