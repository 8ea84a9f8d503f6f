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
  auto state = state_.find(handle);
  const bool on_host = state != state_.end() && state->second.on_host;
  if (state != state_.end()) state_.erase(state);
  auto charge = handles_.erase(handle);
  if (!charge) return;
  if (on_host) {
    memory_.tenant().ledger().left_host(charge->device, charge->bytes);
  } else {
    memory_.release(static_cast<int>(charge->device), charge->bytes);
  }
}

void VmmMemory::set_on_host(uint64_t handle, bool on_host) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_[handle].on_host = on_host;
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
