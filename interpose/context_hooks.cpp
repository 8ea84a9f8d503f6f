// Bodies of the context hooks: every CUDA context occupies device memory of its own
// (hundreds of MiB on current GPUs), which the tenant pays for. The footprint per
// context is measured by the broker on each GPU and published in the quota; it is
// reserved before a context is created and returned when it is destroyed. A primary
// context is charged when this process first retains it on a device and returned when
// its last retain is released or it is reset.
#include "charge_records.h"
#include "compute_policy.h"
#include "hook_bodies.h"
#include "memory_policy.h"

namespace fracgpu::shim {
namespace {

uint64_t footprint(MemoryPolicy& policy, const TenantDevice& device) {
  if (device.index == kNoTenantDevice) return 0;
  return policy.session().quota()->devices[device.index].context_footprint.load(std::memory_order_relaxed);
}

template <typename Call>
CUresult created_context(CUdevice ordinal, CUcontext* context, Call&& call) {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (policy == nullptr) return call();
  const TenantDevice device = policy->device(ordinal);
  const uint64_t bytes = footprint(*policy, device);
  if (CUresult rc = policy->reserve(device, bytes, "cuCtxCreate"); rc != CUDA_SUCCESS) return rc;
  CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    policy->release(device.index, bytes);
    return rc;
  }
  policy->remember(&MemoryPolicy::contexts, reinterpret_cast<uintptr_t>(*context),
                   {static_cast<uint32_t>(device.index), bytes, 0});
  return rc;
}

// Drops the primary context's charge on `ordinal` when its last retain goes (or on a
// reset), returning exactly the bytes charged at the first retain.
CUresult primary_released(CUdevice ordinal, CUresult rc, bool reset) {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (rc != CUDA_SUCCESS || policy == nullptr) return rc;
  std::lock_guard<std::mutex> lock(policy->primary_mutex);
  MemoryPolicy::PrimaryCharge& charge = policy->primary_retains[ordinal];
  if (charge.retains == 0) return rc;
  charge.retains = reset ? 0 : charge.retains - 1;
  if (charge.retains == 0) {
    policy->release(charge.index, charge.bytes);
    charge = {};
  }
  return rc;
}

}  // namespace

CUresult HookBody<HookId::cuCtxCreate_v2>::call(PFN_cuCtxCreate_v3020 real, CUcontext* ctx, unsigned int flags,
                                                CUdevice dev) noexcept {
  return created_context(dev, ctx, [&] { return real(ctx, flags, dev); });
}

CUresult HookBody<HookId::cuCtxCreate>::call(PFN_cuCtxCreate_v2000 real, CUcontext* ctx, unsigned int flags,
                                             CUdevice_v1 dev) noexcept {
  return created_context(dev, ctx, [&] { return real(ctx, flags, dev); });
}

CUresult HookBody<HookId::cuCtxCreate_v3>::call(PFN_cuCtxCreate_v11040 real, CUcontext* ctx,
                                                CUexecAffinityParam* params, int count, unsigned int flags,
                                                CUdevice dev) noexcept {
  return created_context(dev, ctx, [&] { return real(ctx, params, count, flags, dev); });
}

CUresult HookBody<HookId::cuCtxCreate_v4>::call(PFN_cuCtxCreate_v12050 real, CUcontext* ctx,
                                                CUctxCreateParams* params, unsigned int flags,
                                                CUdevice dev) noexcept {
  return created_context(dev, ctx, [&] { return real(ctx, params, flags, dev); });
}

CUresult HookBody<HookId::cuCtxDestroy_v2>::call(PFN_cuCtxDestroy_v4000 real, CUcontext ctx) noexcept {
  if (ComputePolicy* compute = ComputePolicy::active()) compute->forget_context(ctx);
  return uncharged(&MemoryPolicy::contexts, ctx, [&] { return real(ctx); });
}

CUresult HookBody<HookId::cuCtxDestroy>::call(PFN_cuCtxDestroy_v2000 real, CUcontext ctx) noexcept {
  if (ComputePolicy* compute = ComputePolicy::active()) compute->forget_context(ctx);
  return uncharged(&MemoryPolicy::contexts, ctx, [&] { return real(ctx); });
}

CUresult HookBody<HookId::cuDevicePrimaryCtxRetain>::call(PFN_cuDevicePrimaryCtxRetain_v7000 real,
                                                          CUcontext* ctx, CUdevice dev) noexcept {
  MemoryPolicy* policy = MemoryPolicy::active();
  if (policy == nullptr) return real(ctx, dev);
  std::lock_guard<std::mutex> lock(policy->primary_mutex);
  MemoryPolicy::PrimaryCharge& charge = policy->primary_retains[dev];
  const TenantDevice device = policy->device(dev);
  const uint64_t bytes = charge.retains == 0 ? footprint(*policy, device) : 0;
  if (charge.retains == 0) {
    if (CUresult rc = policy->reserve(device, bytes, "cuDevicePrimaryCtxRetain"); rc != CUDA_SUCCESS) return rc;
  }
  CUresult rc = real(ctx, dev);
  if (rc != CUDA_SUCCESS) {
    if (bytes > 0) policy->release(device.index, bytes);
    return rc;
  }
  if (charge.retains++ == 0) charge.index = device.index, charge.bytes = bytes;
  return rc;
}

CUresult HookBody<HookId::cuDevicePrimaryCtxRelease_v2>::call(PFN_cuDevicePrimaryCtxRelease_v11000 real,
                                                              CUdevice dev) noexcept {
  return primary_released(dev, real(dev), false);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxRelease>::call(PFN_cuDevicePrimaryCtxRelease_v7000 real,
                                                           CUdevice dev) noexcept {
  return primary_released(dev, real(dev), false);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxReset_v2>::call(PFN_cuDevicePrimaryCtxReset_v11000 real,
                                                            CUdevice dev) noexcept {
  return primary_released(dev, real(dev), true);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxReset>::call(PFN_cuDevicePrimaryCtxReset_v7000 real,
                                                         CUdevice dev) noexcept {
  return primary_released(dev, real(dev), true);
}

}  // namespace fracgpu::shim
