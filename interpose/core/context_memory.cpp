// Charges of context footprints (see context_memory.h).
#include "core/context_memory.h"

namespace fracgpu {

uint64_t ContextMemory::footprint(const TenantDevice& device) {
  if (device.index == kNoTenantDevice) return 0;
  return memory_.tenant().quota()->devices[device.index].context_footprint.load(
      std::memory_order_relaxed);
}

CUresult ContextMemory::create(CUdevice ordinal, CUcontext* context, DriverCall call) {
  const TenantDevice device = memory_.devices().device(ordinal);
  const uint64_t bytes = footprint(device);
  if (CUresult rc = memory_.reserve(device, bytes, "cuCtxCreate"); rc != CUDA_SUCCESS) return rc;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    memory_.release(device.index, bytes);
    return rc;
  }
  memory_.remember(contexts_, key_of(*context), {static_cast<uint32_t>(device.index), bytes, 0});
  return rc;
}

CUresult ContextMemory::destroy(CUcontext context, DriverCall call) {
  return memory_.uncharged(contexts_, key_of(context), call);
}

CUresult ContextMemory::retain_primary(CUdevice ordinal, DriverCall call) {
  std::lock_guard<std::mutex> lock(primary_mutex_);
  PrimaryCharge& charge = primary_[ordinal];
  const TenantDevice device = memory_.devices().device(ordinal);
  const uint64_t bytes = charge.retains == 0 ? footprint(device) : 0;
  if (charge.retains == 0) {
    if (CUresult rc = memory_.reserve(device, bytes, "cuDevicePrimaryCtxRetain");
        rc != CUDA_SUCCESS)
      return rc;
  }
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    if (bytes > 0) memory_.release(device.index, bytes);
    return rc;
  }
  if (charge.retains++ == 0) charge.index = device.index, charge.bytes = bytes;
  return rc;
}

CUresult ContextMemory::release_primary(CUdevice ordinal, bool reset, DriverCall call) {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(primary_mutex_);
  PrimaryCharge& charge = primary_[ordinal];
  if (charge.retains == 0) return rc;
  charge.retains = reset ? 0 : charge.retains - 1;
  if (charge.retains == 0) {
    memory_.release(charge.index, charge.bytes);
    charge = {};
  }
  return rc;
}

uint64_t ContextMemory::primary_charge(CUdevice ordinal) {
  std::lock_guard<std::mutex> lock(primary_mutex_);
  auto it = primary_.find(ordinal);
  return it == primary_.end() ? 0 : it->second.bytes;
}

}  // namespace fracgpu
