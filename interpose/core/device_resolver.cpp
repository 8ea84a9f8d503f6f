// Implementation of DeviceResolver (see device_resolver.h). The UUID match runs once per
// ordinal; afterwards a lookup is one relaxed load.
#include "core/device_resolver.h"

#include <cstring>
#include <string>

#include "fracgpu/gpu_uuid.h"

namespace fracgpu {

DeviceResolver::DeviceResolver(const DriverCalls& calls, const TenantQuota* quota)
    : calls_(calls), quota_(quota) {
  for (auto& entry : cache_) entry.store(kUnknown, std::memory_order_relaxed);
}

int DeviceResolver::tenant_device(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return kNoTenantDevice;
  int cached = cache_[ordinal].load(std::memory_order_relaxed);
  if (cached != kUnknown) return cached;
  CUuuid uuid{};
  if (calls_.cuDeviceGetUuid == nullptr || calls_.cuDeviceGetUuid(&uuid, ordinal) != CUDA_SUCCESS) {
    return kNoTenantDevice;  // not cached: the driver may answer later (e.g. after cuInit)
  }
  int found = kNoTenantDevice;
  const std::string text = format_gpu_uuid(uuid.bytes);
  for (uint32_t i = 0; i < quota_->device_count && i < kMaxDevices; ++i) {
    const DeviceQuota& d = quota_->devices[i];
    if (d.present != 0 && strncmp(d.uuid, text.c_str(), kUuidSize) == 0)
      found = static_cast<int>(i);
  }
  cache_[ordinal].store(found, std::memory_order_relaxed);
  return found;
}

bool DeviceResolver::current_device(CUdevice* ordinal) {
  int visible = visible_devices_.load(std::memory_order_relaxed);
  if (visible == 0 && calls_.cuDeviceGetCount != nullptr) {
    int count = 0;
    if (calls_.cuDeviceGetCount(&count) == CUDA_SUCCESS) visible_devices_.store(visible = count);
  }
  if (visible == 1) {  // one device: no driver call on the allocation path
    *ordinal = 0;
    return true;
  }
  return calls_.cuCtxGetDevice != nullptr && calls_.cuCtxGetDevice(ordinal) == CUDA_SUCCESS;
}

bool DeviceResolver::current(TenantDevice* out) {
  if (!current_device(&out->ordinal)) return false;
  out->index = tenant_device(out->ordinal);
  return true;
}

bool DeviceResolver::of_stream(CUstream stream, TenantDevice* out) {
  if (current(out)) return true;
  auto stream_device = calls_.cuStreamGetDevice;
  if (stream == nullptr || stream_device == nullptr ||
      stream_device(stream, &out->ordinal) != CUDA_SUCCESS) {
    return false;
  }
  *out = device(out->ordinal);
  return true;
}

}  // namespace fracgpu
