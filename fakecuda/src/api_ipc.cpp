// Interprocess sharing entry points: legacy CUDA IPC of device memory (cuIpcGetMemHandle,
// cuIpcOpenMemHandle v1/v2, cuIpcCloseMemHandle; ipc_memory.h) and the VMM shareable
// handles (cuMemExportToShareableHandle / cuMemImportFromShareableHandle with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; virtual_memory.h, shared_physical.h). Other
// shareable handle types (fabric, Win32) are CUDA_ERROR_NOT_SUPPORTED, as on a Linux
// machine without an IMEX domain. Event IPC (cuIpcGetEventHandle) is not simulated.
#include <cstdint>

#include "api_support.h"
#include "virtual_memory.h"

using namespace fakecuda;

namespace {

CUresult open_mem_handle(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags) {
  if (pdptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    return driver.ipc_memory.open(driver, context, handle, flags, *pdptr);
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context&) {
    return driver.ipc_memory.get_handle(driver, dptr, *pHandle);
  });
}

extern "C" CUresult fakecuda_impl_cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                                     unsigned int Flags) {
  return open_mem_handle(pdptr, handle, Flags);
}

extern "C" CUresult fakecuda_impl_cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                                        unsigned int Flags) {
  return open_mem_handle(pdptr, handle, Flags);
}

extern "C" CUresult fakecuda_impl_cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return with_context(
      [&](Driver& driver, Context&) { return driver.ipc_memory.close(driver, dptr); });
}

extern "C" CUresult fakecuda_impl_cuMemExportToShareableHandle(void* shareableHandle,
                                                               CUmemGenericAllocationHandle handle,
                                                               CUmemAllocationHandleType handleType,
                                                               unsigned long long flags) {
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  return with_driver([&](Driver& driver) {
    int fd = -1;
    const CUresult status = driver.virtual_memory.export_fd(handle, fd);
    if (status == CUDA_SUCCESS) *static_cast<int*>(shareableHandle) = fd;
    return status;
  });
}

extern "C" CUresult fakecuda_impl_cuMemImportFromShareableHandle(
    CUmemGenericAllocationHandle* handle, void* osHandle, CUmemAllocationHandleType shHandleType) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // The descriptor travels in the pointer's bits, as the real API takes it.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    CUmemGenericAllocationHandle imported = 0;
    CUresult status = driver.virtual_memory.import_fd(driver.memory(), fd, imported);
    if (status != CUDA_SUCCESS) return status;
    CUmemAllocationProp prop{};
    driver.virtual_memory.properties(imported, prop);
    if (driver.ordinal_of(static_cast<uint32_t>(prop.location.id)) < 0) {
      driver.virtual_memory.release(driver.memory(), imported);
      return CUDA_ERROR_NOT_SUPPORTED;  // on a device this process does not see
    }
    *handle = imported;
    return CUDA_SUCCESS;
  });
}
