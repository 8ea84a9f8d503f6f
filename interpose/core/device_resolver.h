// DeviceResolver: which of the tenant's quota entries a CUDA device ordinal of this
// process is. Ordinals depend on CUDA_VISIBLE_DEVICES and differ between processes,
// so devices are matched by UUID (as the driver reports it) against the quota written
// by the broker. Results are cached per ordinal: after the first call per device the
// lookup is one relaxed atomic load. When the process sees a single device, the
// current device needs no driver call at all.
// Injected: DriverCalls (cuDeviceGetCount, cuDeviceGetUuid, cuCtxGetDevice,
// cuStreamGetDevice) and the tenant's quota.
#pragma once

#include <cuda.h>

#include <atomic>

#include "core/driver_calls.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

inline constexpr int kNoTenantDevice = -1;  // the tenant has no quota on this device

// A device of this process as the quota sees it.
struct TenantDevice {
  CUdevice ordinal = 0;
  int index = kNoTenantDevice;  // into TenantQuota::devices
};

class DeviceResolver {
 public:
  DeviceResolver(const DriverCalls& calls, const TenantQuota* quota);

  // Quota index for a device ordinal, or kNoTenantDevice.
  int tenant_device(CUdevice ordinal);
  TenantDevice device(CUdevice ordinal) { return {ordinal, tenant_device(ordinal)}; }
  // The device of the calling thread's current context; false when there is none.
  bool current_device(CUdevice* ordinal);
  bool current(TenantDevice* out);
  // The device of a stream-ordered call: the current context's, else the stream's own
  // (stream-ordered calls need no current context).
  bool of_stream(CUstream stream, TenantDevice* out);

 private:
  static constexpr int kMaxOrdinals = 64;
  static constexpr int kUnknown = -2;
  const DriverCalls& calls_;
  const TenantQuota* quota_;
  std::atomic<int> visible_devices_{0};
  std::atomic<int> cache_[kMaxOrdinals];
};

}  // namespace fracgpu
