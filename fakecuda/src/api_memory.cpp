// Device and host memory entry points: cuMemAlloc/Free/AllocPitch/AllocManaged,
// cuMemGetInfo (free = capacity - used across ALL processes, as on a real GPU),
// cuMemGetAddressRange, pinned host memory and host registration. The legacy v1 ABIs
// (32-bit CUdeviceptr_v1 and unsigned int sizes) get low-address mappings.
#include <algorithm>

#include "api_support.h"
#include "capture.h"
#include "device_memory.h"

using namespace fakecuda;

namespace {

constexpr size_t kPitchAlignment = 512;

CUresult alloc_device(CUdeviceptr* dptr, size_t bytes, MemoryKind kind, bool low_address) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    CUresult status = check_unsafe_call();  // synchronous allocation (see capture.h)
    if (status != CUDA_SUCCESS) return status;
    DeviceAllocationRequest request;
    request.bytes = bytes;
    request.kind = kind;
    request.low_address = low_address;
    return allocate_device_memory(driver, context, request, *dptr);
  });
}

CUresult alloc_pitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                     unsigned element_size, bool low_address) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
  size_t row = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (height > SIZE_MAX / row) return CUDA_ERROR_INVALID_VALUE;
  CUresult status = alloc_device(dptr, row * height, MemoryKind::Device, low_address);
  if (status == CUDA_SUCCESS) *pitch = row;
  return status;
}

CUresult memory_info(size_t* free_bytes, size_t* total_bytes) {
  return with_context([&](Driver& driver, Context& context) {
    driver.processes().sweep_dead();  // memory of processes that died is free again
    uint64_t capacity = driver.memory().capacity(context.device());
    uint64_t used = std::min(driver.memory().used(context.device()), capacity);
    if (free_bytes != nullptr) *free_bytes = capacity - used;
    if (total_bytes != nullptr) *total_bytes = capacity;
    return CUDA_SUCCESS;
  });
}

CUresult address_range(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  return with_driver([&](Driver& driver) {
    std::optional<Allocation> found = driver.allocations.find(dptr);
    if (!found || found->is_host_kind()) return CUDA_ERROR_NOT_FOUND;
    if (base != nullptr) *base = found->base;
    if (size != nullptr) *size = found->size;
    return CUDA_SUCCESS;
  });
}

CUresult alloc_host(void** pp, size_t bytes, unsigned flags, bool low_address) {
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned kKnownFlags =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    CUresult status = check_unsafe_call();
    if (status != CUDA_SUCCESS) return status;
    return allocate_host_memory(driver, context, bytes, flags, low_address, *pp);
  });
}

CUresult host_device_pointer(CUdeviceptr* pdptr, void* p, unsigned flags) {
  if (pdptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context&) {
    std::optional<Allocation> found = driver.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (!found || !found->is_host_kind()) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: same address
    return CUDA_SUCCESS;
  });
}

CUresult register_host(void* p, size_t bytes, unsigned flags) {
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    uintptr_t base = reinterpret_cast<uintptr_t>(p);
    // Like the real driver: any byte already registered (or pinned) refuses the whole range;
    // sub-ranges of one mapping register separately.
    if (driver.allocations.overlaps(base, bytes)) {
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    Allocation allocation;
    allocation.base = base;
    allocation.size = bytes;
    allocation.kind = MemoryKind::HostRegistered;
    allocation.device = context.device();
    allocation.context = context.handle();
    allocation.buffer_id = driver.next_id();
    allocation.host_flags = flags;
    driver.allocations.insert(allocation);
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return alloc_device(dptr, bytesize, MemoryKind::Device, false);
}

extern "C" CUresult fakecuda_impl_cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  CUresult status = alloc_device(&wide, bytesize, MemoryKind::Device, true);
  if (status == CUDA_SUCCESS) *dptr = static_cast<CUdeviceptr_v1>(wide);
  return status;
}

extern "C" CUresult fakecuda_impl_cuMemFree_v2(CUdeviceptr dptr) {
  return with_driver([&](Driver& driver) {
    CUresult status = check_unsafe_call();
    return status != CUDA_SUCCESS ? status : free_device_memory(driver, dptr);
  });
}

extern "C" CUresult fakecuda_impl_cuMemFree(CUdeviceptr_v1 dptr) {
  return fakecuda_impl_cuMemFree_v2(dptr);
}

extern "C" CUresult fakecuda_impl_cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch,
                                                     size_t WidthInBytes, size_t Height,
                                                     unsigned int ElementSizeBytes) {
  return alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, false);
}

extern "C" CUresult fakecuda_impl_cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                                  unsigned int WidthInBytes, unsigned int Height,
                                                  unsigned int ElementSizeBytes) {
  if (dptr == nullptr || pPitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  size_t pitch = 0;
  CUresult status = alloc_pitch(&wide, &pitch, WidthInBytes, Height, ElementSizeBytes, true);
  if (status != CUDA_SUCCESS) return status;
  *dptr = static_cast<CUdeviceptr_v1>(wide);
  *pPitch = static_cast<unsigned>(pitch);
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                                    unsigned int flags) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  return alloc_device(dptr, bytesize, MemoryKind::Managed, false);
}

extern "C" CUresult fakecuda_impl_cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (free == nullptr && total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return memory_info(free, total);
}

extern "C" CUresult fakecuda_impl_cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (free == nullptr && total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t free_bytes = 0, total_bytes = 0;
  CUresult status = memory_info(&free_bytes, &total_bytes);
  if (status != CUDA_SUCCESS) return status;
  // The v1 ABI cannot express more than 4 GiB; saturate like old drivers did.
  if (free != nullptr) *free = static_cast<unsigned>(std::min<size_t>(free_bytes, 0xffffffffu));
  if (total != nullptr) *total = static_cast<unsigned>(std::min<size_t>(total_bytes, 0xffffffffu));
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                                          CUdeviceptr dptr) {
  return address_range(pbase, psize, dptr);
}

extern "C" CUresult fakecuda_impl_cuMemGetAddressRange(CUdeviceptr_v1* pbase, unsigned int* psize,
                                                       CUdeviceptr_v1 dptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult status = address_range(&base, &size, dptr);
  if (status != CUDA_SUCCESS) return status;
  if (store_narrow(pbase, base) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  return store_narrow(psize, size);
}

extern "C" CUresult fakecuda_impl_cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return alloc_host(pp, bytesize, 0, false);
}

extern "C" CUresult fakecuda_impl_cuMemAllocHost(void** pp, unsigned int bytesize) {
  return alloc_host(pp, bytesize, 0, false);
}

extern "C" CUresult fakecuda_impl_cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return alloc_host(pp, bytesize, Flags, false);
}

extern "C" CUresult fakecuda_impl_cuMemFreeHost(void* p) {
  return with_driver([&](Driver& driver) {
    CUresult status = check_unsafe_call();
    return status != CUDA_SUCCESS ? status : free_host_memory(driver, p);
  });
}

extern "C" CUresult fakecuda_impl_cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p,
                                                               unsigned int Flags) {
  return host_device_pointer(pdptr, p, Flags);
}

extern "C" CUresult fakecuda_impl_cuMemHostGetDevicePointer(CUdeviceptr_v1* pdptr, void* p,
                                                            unsigned int Flags) {
  if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr wide = 0;
  CUresult status = host_device_pointer(&wide, p, Flags);
  if (status != CUDA_SUCCESS) return status;
  return store_narrow(pdptr, wide);
}

extern "C" CUresult fakecuda_impl_cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (pFlags == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::optional<Allocation> found = driver.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (!found || !found->is_host_kind()) return CUDA_ERROR_INVALID_VALUE;
    *pFlags = found->host_flags;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuMemHostRegister_v2(void* p, size_t bytesize,
                                                       unsigned int Flags) {
  return register_host(p, bytesize, Flags);
}

extern "C" CUresult fakecuda_impl_cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return register_host(p, bytesize, Flags);
}

extern "C" CUresult fakecuda_impl_cuMemHostUnregister(void* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    uintptr_t base = reinterpret_cast<uintptr_t>(p);
    std::optional<Allocation> found = driver.allocations.find(base);
    if (!found || found->base != base || found->kind != MemoryKind::HostRegistered) {
      return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    drain_all_contexts(driver);
    driver.allocations.take(base);
    return CUDA_SUCCESS;
  });
}
