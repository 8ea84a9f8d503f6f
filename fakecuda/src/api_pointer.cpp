// cuPointerGetAttribute(s): answers from the allocation registry. Pointers the driver
// does not know get CUDA_ERROR_INVALID_VALUE from the single-attribute query and
// zero values from the multi-attribute one, as the real driver does for unregistered
// host memory. Boolean attributes are written as int.
#include <cstring>

#include "api_support.h"

using namespace fakecuda;

namespace {

template <typename T>
void put(void* data, T value) {
  std::memcpy(data, &value, sizeof value);
}

bool host_accessible(const Allocation& a) {
  return a.is_host_kind() || a.kind == MemoryKind::Managed;
}

CUmemorytype memory_type(const Allocation& a) {
  return a.is_host_kind() ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
}

// Writes one attribute of the allocation containing `ptr`.
CUresult read_attribute(const Allocation& a, CUpointer_attribute attribute, void* data,
                        CUdeviceptr ptr) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      put(data, a.context);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put(data, static_cast<unsigned>(memory_type(a)));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      put(data, ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!host_accessible(a)) return CUDA_ERROR_INVALID_VALUE;
      put(data, reinterpret_cast<void*>(ptr));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
      put(data, 1);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      put(data, static_cast<unsigned long long>(a.buffer_id));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      put(data, a.kind == MemoryKind::Managed ? 1 : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      put(data, current_driver()->ordinal_of(a.device));  // an ordinal of this process
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      put(data, a.legacy_ipc_capable() ? 1 : 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      put(data, static_cast<CUdeviceptr>(a.base));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      put(data, a.size);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: {
      // VMM memory: the handle types its cuMemCreate asked for (what it can be exported as).
      CUmemAllocationProp prop{};
      const bool vmm =
          a.kind == MemoryKind::VmmMapping &&
          current_driver()->virtual_memory.properties(a.vmm_handle, prop) == CUDA_SUCCESS;
      put(data, static_cast<unsigned long long>(vmm ? prop.requestedHandleTypes
                                                    : CU_MEM_HANDLE_TYPE_NONE));
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put(data, static_cast<unsigned>(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      put(data, a.pool);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put(data, static_cast<unsigned long long>(a.buffer_id));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      put(data, 0);
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Size of the value written for `attribute` (used to zero it for unknown pointers).
size_t attribute_size(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return 8;
    default:
      return 4;
  }
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                                        CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::optional<Allocation> found = driver.allocations.find(ptr);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    return read_attribute(*found, attribute, data, ptr);
  });
}

extern "C" CUresult fakecuda_impl_cuPointerGetAttributes(unsigned int numAttributes,
                                                         CUpointer_attribute* attributes,
                                                         void** data, CUdeviceptr ptr) {
  if (numAttributes == 0 || attributes == nullptr || data == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::optional<Allocation> found = driver.allocations.find(ptr);
    for (unsigned i = 0; i < numAttributes; ++i) {
      if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      if (!found || read_attribute(*found, attributes[i], data[i], ptr) != CUDA_SUCCESS) {
        std::memset(data[i], 0, attribute_size(attributes[i]));
      }
    }
    return CUDA_SUCCESS;
  });
}
