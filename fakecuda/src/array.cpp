// Array sizing and the array entry points (see array.h): cuArrayCreate (v1/v2),
// cuArray3DCreate (v1/v2), cuArrayDestroy, cuArray(3D)GetDescriptor (v1/v2),
// cuMipmappedArrayCreate/Destroy.
#include "array.h"

#include <algorithm>

#include "api_support.h"

namespace fakecuda {

size_t array_format_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
      return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
      return 8;
    default:
      return 0;
  }
}

uint64_t array_level_bytes(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, unsigned level) {
  size_t element = array_format_bytes(descriptor.Format);
  unsigned channels = descriptor.NumChannels;
  if (element == 0 || descriptor.Width == 0 || (channels != 1 && channels != 2 && channels != 4))
    return 0;
  auto extent = [level](size_t size) -> uint64_t { return std::max<uint64_t>(1, size >> level); };
  return extent(descriptor.Width) * extent(descriptor.Height) * extent(descriptor.Depth) *
         channels * element;
}

void release_all_arrays(Driver& driver) {
  for (const std::shared_ptr<Array>& array : driver.handles.all<Array>()) {
    if (driver.handles.take<Array>(array.get()))
      driver.memory().uncharge(array->device, array->charged_bytes);
  }
  for (const std::shared_ptr<MipmappedArray>& array : driver.handles.all<MipmappedArray>()) {
    if (driver.handles.take<MipmappedArray>(array.get()))
      driver.memory().uncharge(array->device, array->charged_bytes);
  }
}

namespace {

CUresult create_array(const CUDA_ARRAY3D_DESCRIPTOR* descriptor, CUarray* out) {
  if (descriptor == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    uint64_t bytes = array_level_bytes(*descriptor, 0);
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!driver.memory().charge(context.device(), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    auto array = std::make_shared<Array>(*descriptor, context.device(), bytes);
    driver.handles.add(array);
    *out = array->handle();
    return CUDA_SUCCESS;
  });
}

CUresult describe_array(CUarray handle, CUDA_ARRAY3D_DESCRIPTOR& out) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Array> array = driver.handles.get<Array>(handle);
    if (!array) return CUDA_ERROR_INVALID_HANDLE;
    out = array->descriptor;
    return CUDA_SUCCESS;
  });
}

template <typename Legacy>
CUDA_ARRAY3D_DESCRIPTOR widen(const Legacy& d) {
  CUDA_ARRAY3D_DESCRIPTOR full{};
  full.Width = d.Width;
  full.Height = d.Height;
  full.Format = d.Format;
  full.NumChannels = d.NumChannels;
  return full;
}

}  // namespace
}  // namespace fakecuda

using namespace fakecuda;

extern "C" CUresult fakecuda_impl_cuArrayCreate_v2(CUarray* pHandle,
                                                   const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full = widen(*pAllocateArray);
  return create_array(&full, pHandle);
}

extern "C" CUresult fakecuda_impl_cuArrayCreate(CUarray* pHandle,
                                                const CUDA_ARRAY_DESCRIPTOR_v1* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full = widen(*pAllocateArray);
  return create_array(&full, pHandle);
}

extern "C" CUresult fakecuda_impl_cuArray3DCreate_v2(
    CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  return create_array(pAllocateArray, pHandle);
}

extern "C" CUresult fakecuda_impl_cuArray3DCreate(
    CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full = widen(*pAllocateArray);
  full.Depth = pAllocateArray->Depth;
  full.Flags = pAllocateArray->Flags;
  return create_array(&full, pHandle);
}

extern "C" CUresult fakecuda_impl_cuArrayDestroy(CUarray hArray) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Array> array = driver.handles.take<Array>(hArray);
    if (!array) return CUDA_ERROR_INVALID_HANDLE;
    driver.memory().uncharge(array->device, array->charged_bytes);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor,
                                                          CUarray hArray) {
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full{};
  CUresult status = describe_array(hArray, full);
  if (status != CUDA_SUCCESS) return status;
  *pArrayDescriptor = CUDA_ARRAY_DESCRIPTOR{full.Width, full.Height, full.Format, full.NumChannels};
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR_v1* pArrayDescriptor,
                                                       CUarray hArray) {
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full{};
  CUresult status = describe_array(hArray, full);
  if (status != CUDA_SUCCESS) return status;
  pArrayDescriptor->Width = static_cast<unsigned>(full.Width);
  pArrayDescriptor->Height = static_cast<unsigned>(full.Height);
  pArrayDescriptor->Format = full.Format;
  pArrayDescriptor->NumChannels = full.NumChannels;
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuArray3DGetDescriptor_v2(
    CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return describe_array(hArray, *pArrayDescriptor);
}

extern "C" CUresult fakecuda_impl_cuArray3DGetDescriptor(
    CUDA_ARRAY3D_DESCRIPTOR_v1* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR full{};
  CUresult status = describe_array(hArray, full);
  if (status != CUDA_SUCCESS) return status;
  pArrayDescriptor->Width = static_cast<unsigned>(full.Width);
  pArrayDescriptor->Height = static_cast<unsigned>(full.Height);
  pArrayDescriptor->Depth = static_cast<unsigned>(full.Depth);
  pArrayDescriptor->Format = full.Format;
  pArrayDescriptor->NumChannels = full.NumChannels;
  pArrayDescriptor->Flags = full.Flags;
  return CUDA_SUCCESS;
}

extern "C" CUresult fakecuda_impl_cuMipmappedArrayCreate(
    CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pMipmappedArrayDesc,
    unsigned int numMipmapLevels) {
  if (pHandle == nullptr || pMipmappedArrayDesc == nullptr || numMipmapLevels == 0 ||
      numMipmapLevels > 32) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return with_context([&](Driver& driver, Context& context) {
    uint64_t bytes = 0;
    for (unsigned level = 0; level < numMipmapLevels; ++level) {
      uint64_t level_bytes = array_level_bytes(*pMipmappedArrayDesc, level);
      if (level_bytes == 0) return CUDA_ERROR_INVALID_VALUE;
      bytes += level_bytes;
    }
    if (!driver.memory().charge(context.device(), bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    auto array = std::make_shared<MipmappedArray>(*pMipmappedArrayDesc, numMipmapLevels,
                                                  context.device(), bytes);
    driver.handles.add(array);
    *pHandle = array->handle();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<MipmappedArray> array = driver.handles.take<MipmappedArray>(hMipmappedArray);
    if (!array) return CUDA_ERROR_INVALID_HANDLE;
    driver.memory().uncharge(array->device, array->charged_bytes);
    return CUDA_SUCCESS;
  });
}
