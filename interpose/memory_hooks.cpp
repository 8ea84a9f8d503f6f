// Bodies of the device-memory hooks: allocation, release and the memory information
// a tenant sees. Every allocation is reserved against the tenant's ledger before the
// real call and released if the driver refuses; every free releases exactly what was
// charged (AllocationTable). Without a tenant (MemoryPolicy::active() == null) each
// body is a plain forward. Array sizes are estimated before creation and corrected
// to the driver's own figure (cuArrayGetMemoryRequirements) afterwards.
#include <algorithm>
#include <climits>
#include <limits>
#include <utility>

#include "charge_records.h"
#include "hook_bodies.h"
#include "shim_runtime.h"

namespace fracgpu::shim {
namespace {

// Reserve on the current device, then `call` — which performs the driver call and
// returns {result, key of the new allocation} — and remember the charge under the key.
template <typename Call>
CUresult charged(const char* api, AllocationTable MemoryPolicy::*table, uint64_t bytes, Call&& call) {
  MemoryPolicy* policy = MemoryPolicy::active();
  TenantDevice device;
  if (policy == nullptr || !policy->current_device(&device)) return call().first;
  if (CUresult rc = policy->reserve(device, bytes, api); rc != CUDA_SUCCESS) return rc;
  auto [rc, key] = call();
  if (rc != CUDA_SUCCESS) {
    policy->release(device.index, bytes);
    return rc;
  }
  policy->remember(table, key, {static_cast<uint32_t>(device.index), bytes, 0});
  return rc;
}

uint64_t element_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    default: return 4;  // 32-bit formats; others are corrected after creation
  }
}

uint64_t array_bytes(uint64_t width, uint64_t height, uint64_t depth, CUarray_format format, unsigned channels) {
  return std::max<uint64_t>(width, 1) * std::max<uint64_t>(height, 1) * std::max<uint64_t>(depth, 1) *
         element_bytes(format) * std::max(channels, 1u);
}

uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  uint64_t total = 0, w = d.Width, h = d.Height, z = d.Depth;
  for (unsigned level = 0; level < std::max(levels, 1u); ++level) {
    total += array_bytes(w, h, z, d.Format, d.NumChannels);
    w = std::max<uint64_t>(w / 2, 1), h = h / 2, z = z / 2;
  }
  return total;
}

// Replaces the estimate charged for an array with the driver's own size.
template <typename Handle, typename Requirements>
void correct_array_charge(Handle handle, Requirements query) {
  MemoryPolicy* policy = MemoryPolicy::active();
  TenantDevice device;
  if (policy == nullptr || query == nullptr || !policy->current_device(&device)) return;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  auto charge = policy->arrays.find(key_of(handle));
  if (!charge || query(&req, handle, device.ordinal) != CUDA_SUCCESS || req.size == 0) return;
  if (req.size < charge->bytes) {
    policy->release(static_cast<int>(charge->device), charge->bytes - req.size);
  } else if (req.size > charge->bytes) {
    policy->session().ledger().force_charge(charge->device, req.size - charge->bytes);
  }
  policy->arrays.insert(key_of(handle), {charge->device, static_cast<uint64_t>(req.size), 0});
}

}  // namespace

using Result = std::pair<CUresult, uint64_t>;

// Charges an array's estimated size, then corrects the charge to the driver's own figure.
template <typename Handle, typename Requirements, typename Call>
CUresult created_array(const char* api, Handle* array, uint64_t bytes, Requirements DriverCalls::*query,
                       Call&& call) {
  CUresult rc = charged(api, &MemoryPolicy::arrays, bytes, [&] {
    CUresult r = call();
    return Result{r, array ? key_of(*array) : 0};
  });
  if (rc == CUDA_SUCCESS && MemoryPolicy::active()) correct_array_charge(*array, MemoryPolicy::active()->driver().*query);
  return rc;
}

CUresult HookBody<HookId::cuMemAlloc_v2>::call(PFN_cuMemAlloc_v3020 real, CUdeviceptr* dptr, size_t bytes) noexcept {
  return charged("cuMemAlloc", &MemoryPolicy::device_memory, bytes,
                 [&] { CUresult rc = real(dptr, bytes); return Result{rc, dptr ? *dptr : 0}; });
}

CUresult HookBody<HookId::cuMemAlloc>::call(PFN_cuMemAlloc_v2000 real, CUdeviceptr_v1* dptr,
                                            unsigned int bytes) noexcept {
  return charged("cuMemAlloc", &MemoryPolicy::device_memory, bytes,
                 [&] { CUresult rc = real(dptr, bytes); return Result{rc, dptr ? *dptr : 0}; });
}

CUresult HookBody<HookId::cuMemAllocManaged>::call(PFN_cuMemAllocManaged_v6000 real, CUdeviceptr* dptr,
                                                   size_t bytes, unsigned int flags) noexcept {
  return charged("cuMemAllocManaged", &MemoryPolicy::device_memory, bytes,
                 [&] { CUresult rc = real(dptr, bytes, flags); return Result{rc, dptr ? *dptr : 0}; });
}

// The pitch is the driver's choice: charge width x height first, then the difference.
template <typename Ptr, typename Size, typename Real>
CUresult pitched_allocation(Real real, Ptr* dptr, Size* pitch, Size width, Size height, unsigned int element) {
  Size chosen = 0;
  CUresult rc = charged("cuMemAllocPitch", &MemoryPolicy::device_memory, uint64_t{width} * height, [&] {
    CUresult r = real(dptr, &chosen, width, height, element);
    return Result{r, dptr ? uint64_t{*dptr} : 0};
  });
  if (pitch != nullptr) *pitch = chosen;
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr || chosen <= width) return rc;
  auto charge = policy->device_memory.find(*dptr);
  if (!charge) return rc;
  const uint64_t extra = uint64_t{chosen - width} * height;
  TenantDevice device{0, static_cast<int>(charge->device)};
  if (policy->reserve(device, extra, "cuMemAllocPitch") != CUDA_SUCCESS) {
    // The driver's padding does not fit: give the allocation back and report OOM.
    if (auto undo = policy->device_memory.erase(*dptr)) policy->release(device.index, undo->bytes);
    reinterpret_cast<PFN_cuMemFree_v3020>(g_real_functions[hook_index(HookId::cuMemFree_v2)])(*dptr);
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  policy->device_memory.insert(*dptr, {charge->device, charge->bytes + extra, 0});
  return rc;
}

CUresult HookBody<HookId::cuMemAllocPitch_v2>::call(PFN_cuMemAllocPitch_v3020 real, CUdeviceptr* dptr,
                                                    size_t* pitch, size_t width, size_t height,
                                                    unsigned int element) noexcept {
  return pitched_allocation(real, dptr, pitch, width, height, element);
}

CUresult HookBody<HookId::cuMemAllocPitch>::call(PFN_cuMemAllocPitch_v2000 real, CUdeviceptr_v1* dptr,
                                                 unsigned int* pitch, unsigned int width, unsigned int height,
                                                 unsigned int element) noexcept {
  return pitched_allocation(real, dptr, pitch, width, height, element);
}

CUresult HookBody<HookId::cuMemFree_v2>::call(PFN_cuMemFree_v3020 real, CUdeviceptr ptr) noexcept {
  return free_any_device_memory(ptr, [&] { return real(ptr); });
}

CUresult HookBody<HookId::cuMemFree>::call(PFN_cuMemFree_v2000 real, CUdeviceptr_v1 ptr) noexcept {
  return free_any_device_memory(ptr, [&] { return real(ptr); });
}

// The tenant sees its cap as the device: total = cap, free = cap - used (never more
// than the device really has free).
template <typename Size, typename Real>
CUresult memory_info(Real real, Size* free_bytes, Size* total_bytes) {
  CUresult rc = real(free_bytes, total_bytes);
  MemoryPolicy* policy = MemoryPolicy::active();
  TenantDevice device;
  if (rc != CUDA_SUCCESS || policy == nullptr || !policy->current_device(&device)) return rc;
  device = policy->device(device.ordinal);
  size_t free_now = free_bytes ? *free_bytes : SIZE_MAX, total_now = total_bytes ? *total_bytes : 0;
  policy->clamp_memory_info(device, &free_now, &total_now);
  if (free_bytes) *free_bytes = static_cast<Size>(std::min<size_t>(free_now, std::numeric_limits<Size>::max()));
  if (total_bytes) *total_bytes = static_cast<Size>(std::min<size_t>(total_now, std::numeric_limits<Size>::max()));
  return rc;
}

CUresult HookBody<HookId::cuMemGetInfo_v2>::call(PFN_cuMemGetInfo_v3020 real, size_t* free_bytes,
                                                 size_t* total_bytes) noexcept {
  return memory_info(real, free_bytes, total_bytes);
}

CUresult HookBody<HookId::cuMemGetInfo>::call(PFN_cuMemGetInfo_v2000 real, unsigned int* free_bytes,
                                              unsigned int* total_bytes) noexcept {
  return memory_info(real, free_bytes, total_bytes);
}

template <typename Size, typename Device, typename Real>
CUresult total_memory(Real real, Size* bytes, Device ordinal) {
  CUresult rc = real(bytes, ordinal);
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr || bytes == nullptr) return rc;
  TenantDevice device = policy->device(static_cast<CUdevice>(ordinal));
  if (device.index == kNoTenantDevice) return rc;
  const uint64_t limit = policy->session().ledger().limit(static_cast<uint32_t>(device.index));
  *bytes = static_cast<Size>(std::min<uint64_t>({uint64_t{*bytes}, limit, std::numeric_limits<Size>::max()}));
  return rc;
}

CUresult HookBody<HookId::cuDeviceTotalMem_v2>::call(PFN_cuDeviceTotalMem_v3020 real, size_t* bytes,
                                                     CUdevice ordinal) noexcept {
  return total_memory(real, bytes, ordinal);
}

CUresult HookBody<HookId::cuDeviceTotalMem>::call(PFN_cuDeviceTotalMem_v2000 real, unsigned int* bytes,
                                                  CUdevice_v1 ordinal) noexcept {
  return total_memory(real, bytes, ordinal);
}

// Virtual memory management: physical memory is created (and charged) by cuMemCreate
// on the device named in its properties; mapping it costs nothing more.
CUresult HookBody<HookId::cuMemCreate>::call(PFN_cuMemCreate_v10020 real, CUmemGenericAllocationHandle* handle,
                                             size_t size, const CUmemAllocationProp* prop,
                                             unsigned long long flags) noexcept {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (policy == nullptr || prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return real(handle, size, prop, flags);  // host-located memory is not charged
  }
  TenantDevice device = policy->device(prop->location.id);
  if (CUresult rc = policy->reserve(device, size, "cuMemCreate"); rc != CUDA_SUCCESS) return rc;
  CUresult rc = real(handle, size, prop, flags);
  if (rc != CUDA_SUCCESS) {
    policy->release(device.index, size);
    return rc;
  }
  policy->remember(&MemoryPolicy::vmm_handles, *handle, {static_cast<uint32_t>(device.index), size, 0});
  return rc;
}

CUresult HookBody<HookId::cuArrayCreate_v2>::call(PFN_cuArrayCreate_v3020 real, CUarray* array,
                                                  const CUDA_ARRAY_DESCRIPTOR* desc) noexcept {
  const uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels) : 0;
  return created_array("cuArrayCreate", array, bytes, &DriverCalls::cuArrayGetMemoryRequirements,
                       [&] { return real(array, desc); });
}

CUresult HookBody<HookId::cuArray3DCreate_v2>::call(PFN_cuArray3DCreate_v3020 real, CUarray* array,
                                                    const CUDA_ARRAY3D_DESCRIPTOR* desc) noexcept {
  const uint64_t bytes = desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels) : 0;
  return created_array("cuArray3DCreate", array, bytes, &DriverCalls::cuArrayGetMemoryRequirements,
                       [&] { return real(array, desc); });
}

CUresult HookBody<HookId::cuArrayDestroy>::call(PFN_cuArrayDestroy_v2000 real, CUarray array) noexcept {
  return uncharged(&MemoryPolicy::arrays, array, [&] { return real(array); });
}

CUresult HookBody<HookId::cuMipmappedArrayCreate>::call(PFN_cuMipmappedArrayCreate_v5000 real,
                                                        CUmipmappedArray* array,
                                                        const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                        unsigned int levels) noexcept {
  const uint64_t bytes = desc ? mipmap_bytes(*desc, levels) : 0;
  return created_array("cuMipmappedArrayCreate", array, bytes, &DriverCalls::cuMipmappedArrayGetMemoryRequirements,
                       [&] { return real(array, desc, levels); });
}

CUresult HookBody<HookId::cuMipmappedArrayDestroy>::call(PFN_cuMipmappedArrayDestroy_v5000 real,
                                                         CUmipmappedArray array) noexcept {
  return uncharged(&MemoryPolicy::arrays, array, [&] { return real(array); });
}

}  // namespace fracgpu::shim
