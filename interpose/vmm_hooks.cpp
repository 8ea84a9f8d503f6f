// Bodies of the virtual-memory-management hooks (PyTorch's expandable segments, NCCL).
// cuMemCreate charges the physical memory (memory_hooks.cpp); the driver frees it only
// when its handle has been released AND every mapping of it is gone, so a program that
// releases right after mapping (the documented pattern) still holds the memory. The
// charge therefore ends at whichever of cuMemRelease / the last cuMemUnmap comes last.
#include "hook_bodies.h"
#include "memory_policy.h"

namespace fracgpu::shim {
namespace {

// Releases the charge of `handle` (caller holds vmm_mutex, and the handle is done).
void settle_handle(MemoryPolicy& policy, uint64_t handle) {
  policy.vmm_state.erase(handle);
  if (auto charge = policy.vmm_handles.erase(handle)) policy.release(static_cast<int>(charge->device), charge->bytes);
}

}  // namespace

CUresult HookBody<HookId::cuMemMap>::call(PFN_cuMemMap_v10020 real, CUdeviceptr ptr, size_t size, size_t offset,
                                          CUmemGenericAllocationHandle handle, unsigned long long flags) noexcept {
  CUresult rc = real(ptr, size, offset, handle, flags);
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr || !policy->vmm_handles.find(handle)) return rc;
  std::lock_guard<std::mutex> lock(policy->vmm_mutex);
  policy->vmm_state[handle].mappings++;
  policy->vmm_mappings[ptr] = handle;
  return rc;
}

CUresult HookBody<HookId::cuMemUnmap>::call(PFN_cuMemUnmap_v10020 real, CUdeviceptr ptr, size_t size) noexcept {
  CUresult rc = real(ptr, size);
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr) return rc;
  std::lock_guard<std::mutex> lock(policy->vmm_mutex);
  // Every mapping that starts inside the unmapped range is gone.
  auto it = policy->vmm_mappings.lower_bound(ptr);
  while (it != policy->vmm_mappings.end() && it->first < ptr + size) {
    const uint64_t handle = it->second;
    it = policy->vmm_mappings.erase(it);
    auto state = policy->vmm_state.find(handle);
    if (state == policy->vmm_state.end()) continue;
    if (--state->second.mappings <= 0 && state->second.released) settle_handle(*policy, handle);
  }
  return rc;
}

CUresult HookBody<HookId::cuMemRelease>::call(PFN_cuMemRelease_v10020 real,
                                              CUmemGenericAllocationHandle handle) noexcept {
  CUresult rc = real(handle);
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr) return rc;
  std::lock_guard<std::mutex> lock(policy->vmm_mutex);
  auto state = policy->vmm_state.find(handle);
  if (state != policy->vmm_state.end() && state->second.mappings > 0) {
    state->second.released = true;  // still mapped: the memory lives on, and so does the charge
  } else {
    settle_handle(*policy, handle);
  }
  return rc;
}

}  // namespace fracgpu::shim
