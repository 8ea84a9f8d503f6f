// Virtual memory management entry points (cuMemCreate, cuMemRelease,
// cuMemAddressReserve/Free, cuMemMap/Unmap, cuMemSetAccess/GetAccess, granularity and
// handle queries). Physical memory is charged to its device at cuMemCreate and
// returned at the last cuMemRelease/cuMemUnmap, see virtual_memory.cpp.
#include "api_support.h"
#include "device_memory.h"
#include "virtual_memory.h"

using namespace fakecuda;

extern "C" CUresult fakecuda_impl_cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                              const CUmemAllocationProp* prop,
                                              unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
        !driver.valid_device(prop->location.id)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    CUmemAllocationProp physical_prop = *prop;
    if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
      physical_prop.location.id = static_cast<int>(driver.physical(prop->location.id));
    return driver.virtual_memory.create(driver.memory(), size, physical_prop, *handle);
  });
}

extern "C" CUresult fakecuda_impl_cuMemRelease(CUmemGenericAllocationHandle handle) {
  return with_driver(
      [&](Driver& driver) { return driver.virtual_memory.release(driver.memory(), handle); });
}

extern "C" CUresult fakecuda_impl_cuMemAddressReserve(CUdeviceptr* ptr, size_t size,
                                                      size_t alignment, CUdeviceptr addr,
                                                      unsigned long long flags) {
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver(
      [&](Driver& driver) { return driver.virtual_memory.reserve(size, alignment, addr, *ptr); });
}

extern "C" CUresult fakecuda_impl_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return with_driver(
      [&](Driver& driver) { return driver.virtual_memory.free_reservation(ptr, size); });
}

extern "C" CUresult fakecuda_impl_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                           CUmemGenericAllocationHandle handle,
                                           unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    return driver.virtual_memory.map(driver.allocations, ptr, size, offset, handle);
  });
}

extern "C" CUresult fakecuda_impl_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return with_driver([&](Driver& driver) {
    drain_all_contexts(driver);  // in-flight work may still touch the mapping
    return driver.virtual_memory.unmap(driver.memory(), driver.allocations, ptr, size);
  });
}

extern "C" CUresult fakecuda_impl_cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                                 const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
          !driver.valid_device(desc[i].location.id)) {
        return CUDA_ERROR_INVALID_DEVICE;
      }
    }
    // Mappings are created read-write already; access only needs the range to be mapped.
    return driver.virtual_memory.mapped(driver.allocations, ptr, size) ? CUDA_SUCCESS
                                                                       : CUDA_ERROR_INVALID_VALUE;
  });
}

extern "C" CUresult fakecuda_impl_cuMemGetAccess(unsigned long long* flags,
                                                 const CUmemLocation* location, CUdeviceptr ptr) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (!driver.virtual_memory.mapped(driver.allocations, ptr, 1)) return CUDA_ERROR_INVALID_VALUE;
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuMemGetAllocationGranularity(
    size_t* granularity, const CUmemAllocationProp* prop, CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return with_driver([&](Driver&) {
    *granularity = kVmmGranularity;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    CUresult status = driver.virtual_memory.properties(handle, *prop);
    if (status == CUDA_SUCCESS && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
      prop->location.id = driver.ordinal_of(static_cast<uint32_t>(prop->location.id));
    return status;
  });
}

extern "C" CUresult fakecuda_impl_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                              void* addr) {
  if (handle == nullptr || addr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    return driver.virtual_memory.retain(driver.allocations, reinterpret_cast<uintptr_t>(addr),
                                        *handle);
  });
}
