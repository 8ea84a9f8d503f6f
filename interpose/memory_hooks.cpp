// Bodies of the device-memory hooks: allocation, release, arrays and the memory
// information a tenant sees. Each is one call into MemoryPolicy (core/memory_policy.h),
// which reserves before the real call, releases if the driver refuses, and on a free
// releases exactly what was charged. Without a tenant each body is a plain forward.
// Cost: one load (the tenant) on top of the policy's own (see memory_policy.h).
#include "hook_bodies.h"

namespace fracgpu::shim {

CUresult HookBody<HookId::cuMemAlloc_v2>::call(PFN_cuMemAlloc_v3020 real, CUdeviceptr* dptr,
                                               size_t bytes) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate_device(dptr, bytes, [&] { return real(dptr, bytes); })
           : real(dptr, bytes);
}

CUresult HookBody<HookId::cuMemAlloc>::call(PFN_cuMemAlloc_v2000 real, CUdeviceptr_v1* dptr,
                                            unsigned int bytes) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate("cuMemAlloc", dptr, bytes, [&] { return real(dptr, bytes); })
           : real(dptr, bytes);
}

CUresult HookBody<HookId::cuMemAllocManaged>::call(PFN_cuMemAllocManaged_v6000 real,
                                                   CUdeviceptr* dptr, size_t bytes,
                                                   unsigned int flags) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.allocate("cuMemAllocManaged", dptr, bytes,
                                [&] { return real(dptr, bytes, flags); })
           : real(dptr, bytes, flags);
}

CUresult HookBody<HookId::cuMemAllocPitch_v2>::call(PFN_cuMemAllocPitch_v3020 real,
                                                    CUdeviceptr* dptr, size_t* pitch, size_t width,
                                                    size_t height, unsigned int element) noexcept {
  TenantPolicies* t = tenant();
  if (t == nullptr) return real(dptr, pitch, width, height, element);
  return t->memory.allocate_pitched(dptr, pitch, width, height, [&](size_t* chosen) {
    return real(dptr, chosen, width, height, element);
  });
}

CUresult HookBody<HookId::cuMemAllocPitch>::call(PFN_cuMemAllocPitch_v2000 real,
                                                 CUdeviceptr_v1* dptr, unsigned int* pitch,
                                                 unsigned int width, unsigned int height,
                                                 unsigned int element) noexcept {
  TenantPolicies* t = tenant();
  if (t == nullptr) return real(dptr, pitch, width, height, element);
  return t->memory.allocate_pitched(dptr, pitch, width, height, [&](unsigned int* chosen) {
    return real(dptr, chosen, width, height, element);
  });
}

CUresult HookBody<HookId::cuMemFree_v2>::call(PFN_cuMemFree_v3020 real, CUdeviceptr ptr) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.free(ptr, [&] { return real(ptr); }) : real(ptr);
}

CUresult HookBody<HookId::cuMemFree>::call(PFN_cuMemFree_v2000 real, CUdeviceptr_v1 ptr) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.free(ptr, [&] { return real(ptr); }) : real(ptr);
}

CUresult HookBody<HookId::cuMemGetInfo_v2>::call(PFN_cuMemGetInfo_v3020 real, size_t* free_bytes,
                                                 size_t* total_bytes) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.memory_info(free_bytes, total_bytes,
                                   [&] { return real(free_bytes, total_bytes); })
           : real(free_bytes, total_bytes);
}

CUresult HookBody<HookId::cuMemGetInfo>::call(PFN_cuMemGetInfo_v2000 real, unsigned int* free_bytes,
                                              unsigned int* total_bytes) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.memory_info(free_bytes, total_bytes,
                                   [&] { return real(free_bytes, total_bytes); })
           : real(free_bytes, total_bytes);
}

CUresult HookBody<HookId::cuDeviceTotalMem_v2>::call(PFN_cuDeviceTotalMem_v3020 real, size_t* bytes,
                                                     CUdevice ordinal) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.total_memory(bytes, ordinal, [&] { return real(bytes, ordinal); })
           : real(bytes, ordinal);
}

CUresult HookBody<HookId::cuDeviceTotalMem>::call(PFN_cuDeviceTotalMem_v2000 real,
                                                  unsigned int* bytes,
                                                  CUdevice_v1 ordinal) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.total_memory(bytes, ordinal, [&] { return real(bytes, ordinal); })
           : real(bytes, ordinal);
}

CUresult HookBody<HookId::cuArrayCreate_v2>::call(PFN_cuArrayCreate_v3020 real, CUarray* array,
                                                  const CUDA_ARRAY_DESCRIPTOR* desc) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.create_array(array, desc, [&] { return real(array, desc); })
           : real(array, desc);
}

CUresult HookBody<HookId::cuArray3DCreate_v2>::call(PFN_cuArray3DCreate_v3020 real, CUarray* array,
                                                    const CUDA_ARRAY3D_DESCRIPTOR* desc) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.create_array(array, desc, [&] { return real(array, desc); })
           : real(array, desc);
}

CUresult HookBody<HookId::cuArrayDestroy>::call(PFN_cuArrayDestroy_v2000 real,
                                                CUarray array) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.destroy_array(array, [&] { return real(array); }) : real(array);
}

CUresult HookBody<HookId::cuMipmappedArrayCreate>::call(PFN_cuMipmappedArrayCreate_v5000 real,
                                                        CUmipmappedArray* array,
                                                        const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                        unsigned int levels) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.create_mipmapped_array(array, desc, levels,
                                              [&] { return real(array, desc, levels); })
           : real(array, desc, levels);
}

CUresult HookBody<HookId::cuMipmappedArrayDestroy>::call(PFN_cuMipmappedArrayDestroy_v5000 real,
                                                         CUmipmappedArray array) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.destroy_array(array, [&] { return real(array); }) : real(array);
}

}  // namespace fracgpu::shim
