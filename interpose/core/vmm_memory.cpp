// Charges of VMM physical memory (see vmm_memory.h).
#include "core/vmm_memory.h"

namespace fracgpu {

CUresult VmmMemory::create(CUmemGenericAllocationHandle* handle, size_t size,
                           const CUmemAllocationProp* prop, DriverCall call) {
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return call();  // host memory
  const TenantDevice device = memory_.devices().device(prop->location.id);
  if (CUresult rc = memory_.reserve(device, size, "cuMemCreate"); rc != CUDA_SUCCESS) return rc;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    memory_.release(device.index, size);
    return rc;
  }
  memory_.remember(handles_, *handle, {static_cast<uint32_t>(device.index), size, 0});
  return rc;
}

void VmmMemory::settle(uint64_t handle) {
  state_.erase(handle);
  if (auto charge = handles_.erase(handle))
    memory_.release(static_cast<int>(charge->device), charge->bytes);
}

CUresult VmmMemory::map(CUdeviceptr ptr, CUmemGenericAllocationHandle handle, DriverCall call) {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS || !handles_.find(handle)) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  state_[handle].mappings++;
  mappings_[ptr] = handle;
  return rc;
}

CUresult VmmMemory::unmap(CUdeviceptr ptr, size_t size, DriverCall call) {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  // Every mapping that starts inside the unmapped range is gone.
  auto it = mappings_.lower_bound(ptr);
  while (it != mappings_.end() && it->first < ptr + size) {
    const uint64_t handle = it->second;
    it = mappings_.erase(it);
    auto state = state_.find(handle);
    if (state == state_.end()) continue;
    if (--state->second.mappings <= 0 && state->second.released) settle(handle);
  }
  return rc;
}

CUresult VmmMemory::release(CUmemGenericAllocationHandle handle, DriverCall call) {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  auto state = state_.find(handle);
  if (state != state_.end() && state->second.mappings > 0) {
    state->second.released = true;  // still mapped: the memory lives on, and so does the charge
  } else {
    settle(handle);
  }
  return rc;
}

}  // namespace fracgpu
