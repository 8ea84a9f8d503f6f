// Implementation of DeviceResolver and of the resolution of DriverCalls.
#include "device_resolver.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "fracgpu/gpu_uuid.h"

namespace fracgpu::shim {
namespace {

// The real driver's `name` into `slot`; null when the driver lacks it (or is absent).
template <typename Fn>
void resolve(void* driver, const char* name, Fn* slot) {
  *slot = reinterpret_cast<Fn>(driver ? dlsym(driver, name) : nullptr);
}

}  // namespace

void resolve_driver_calls(void* driver, DriverCalls* calls) {
  auto get = [driver](const char* name, auto* slot) { resolve(driver, name, slot); };
  get("cuDeviceGetCount", &calls->cuDeviceGetCount);
  get("cuDeviceGetUuid_v2", &calls->cuDeviceGetUuid);
  get("cuCtxGetDevice", &calls->cuCtxGetDevice);
  get("cuDeviceGetMemPool", &calls->cuDeviceGetMemPool);
  get("cuMemPoolGetAttribute", &calls->cuMemPoolGetAttribute);
  get("cuArrayGetMemoryRequirements", &calls->cuArrayGetMemoryRequirements);
  get("cuMipmappedArrayGetMemoryRequirements", &calls->cuMipmappedArrayGetMemoryRequirements);
  get("cuStreamGetDevice", &calls->cuStreamGetDevice);
  get("cuCtxPushCurrent_v2", &calls->cuCtxPushCurrent);
  get("cuCtxPopCurrent_v2", &calls->cuCtxPopCurrent);
  get("cuCtxSynchronize", &calls->cuCtxSynchronize);
  get("cuGraphGetNodes", &calls->cuGraphGetNodes);
  get("cuGraphNodeGetType", &calls->cuGraphNodeGetType);
  get("cuGraphMemAllocNodeGetParams", &calls->cuGraphMemAllocNodeGetParams);
  get("cuGraphChildGraphNodeGetGraph", &calls->cuGraphChildGraphNodeGetGraph);
  get("cuDeviceGetGraphMemAttribute", &calls->cuDeviceGetGraphMemAttribute);
  get("cuStreamIsCapturing", &calls->cuStreamIsCapturing);
}

void resolve_capture_ops(void* driver, CaptureOps* ops) {
  auto get = [driver](const char* name, auto* slot) { resolve(driver, name, slot); };
  get("cuThreadExchangeStreamCaptureMode", &ops->exchange_mode);
  get("cuStreamIsCapturing", &ops->stream_is_capturing);
}

void resolve_fence_ops(void* driver, FenceOps* ops) {
  auto get = [driver](const char* name, auto* slot) { resolve(driver, name, slot); };
  get("cuCtxGetCurrent", &ops->ctx_get_current);
  get("cuEventCreate", &ops->event_create);
  get("cuEventRecord", &ops->event_record);
  get("cuEventQuery", &ops->event_query);
  get("cuEventSynchronize", &ops->event_synchronize);
  get("cuEventElapsedTime", &ops->event_elapsed);
  get("cuEventDestroy_v2", &ops->event_destroy);
  get("cuStreamIsCapturing", &ops->stream_is_capturing);
}

void DeviceResolver::init(const DriverCalls* calls, const TenantQuota* quota) {
  calls_ = calls;
  quota_ = quota;
  for (auto& entry : cache_) entry.store(kUnknown, std::memory_order_relaxed);
}

int DeviceResolver::tenant_device(CUdevice ordinal) {
  if (ordinal < 0 || ordinal >= kMaxOrdinals) return kNoTenantDevice;
  int cached = cache_[ordinal].load(std::memory_order_relaxed);
  if (cached != kUnknown) return cached;
  CUuuid uuid{};
  if (calls_->cuDeviceGetUuid == nullptr || calls_->cuDeviceGetUuid(&uuid, ordinal) != CUDA_SUCCESS) {
    return kNoTenantDevice;  // not cached: the driver may answer later (e.g. after cuInit)
  }
  int found = kNoTenantDevice;
  const std::string text = format_gpu_uuid(uuid.bytes);
  for (uint32_t i = 0; i < quota_->device_count && i < kMaxDevices; ++i) {
    const DeviceQuota& d = quota_->devices[i];
    if (d.present != 0 && strncmp(d.uuid, text.c_str(), kUuidSize) == 0) found = static_cast<int>(i);
  }
  cache_[ordinal].store(found, std::memory_order_relaxed);
  return found;
}

bool DeviceResolver::current_device(CUdevice* ordinal) {
  int visible = visible_devices_.load(std::memory_order_relaxed);
  if (visible == 0 && calls_->cuDeviceGetCount != nullptr) {
    int count = 0;
    if (calls_->cuDeviceGetCount(&count) == CUDA_SUCCESS) visible_devices_.store(visible = count);
  }
  if (visible == 1) {  // one device: no driver call on the allocation path
    *ordinal = 0;
    return true;
  }
  return calls_->cuCtxGetDevice != nullptr && calls_->cuCtxGetDevice(ordinal) == CUDA_SUCCESS;
}

}  // namespace fracgpu::shim
