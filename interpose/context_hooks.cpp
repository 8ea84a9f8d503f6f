// Bodies of the context hooks: each is one call into ContextMemory
// (core/context_memory.h), which charges every context's device-memory footprint (and
// the primary context's at its first retain); a destroyed context also leaves compute
// scheduling. Without a tenant each body is a plain forward. Cost: context calls only.
#include "hook_bodies.h"

namespace fracgpu::shim {

CUresult HookBody<HookId::cuCtxCreate_v2>::call(PFN_cuCtxCreate_v3020 real, CUcontext* ctx,
                                                unsigned int flags, CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.create(dev, ctx, [&] { return real(ctx, flags, dev); })
           : real(ctx, flags, dev);
}

CUresult HookBody<HookId::cuCtxCreate>::call(PFN_cuCtxCreate_v2000 real, CUcontext* ctx,
                                             unsigned int flags, CUdevice_v1 dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.create(dev, ctx, [&] { return real(ctx, flags, dev); })
           : real(ctx, flags, dev);
}

CUresult HookBody<HookId::cuCtxCreate_v3>::call(PFN_cuCtxCreate_v11040 real, CUcontext* ctx,
                                                CUexecAffinityParam* params, int count,
                                                unsigned int flags, CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.create(dev, ctx, [&] { return real(ctx, params, count, flags, dev); })
           : real(ctx, params, count, flags, dev);
}

CUresult HookBody<HookId::cuCtxCreate_v4>::call(PFN_cuCtxCreate_v12050 real, CUcontext* ctx,
                                                CUctxCreateParams* params, unsigned int flags,
                                                CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.create(dev, ctx, [&] { return real(ctx, params, flags, dev); })
           : real(ctx, params, flags, dev);
}

CUresult HookBody<HookId::cuCtxDestroy_v2>::call(PFN_cuCtxDestroy_v4000 real,
                                                 CUcontext ctx) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->destroy_context(ctx, [&] { return real(ctx); }) : real(ctx);
}

CUresult HookBody<HookId::cuCtxDestroy>::call(PFN_cuCtxDestroy_v2000 real, CUcontext ctx) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->destroy_context(ctx, [&] { return real(ctx); }) : real(ctx);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxRetain>::call(PFN_cuDevicePrimaryCtxRetain_v7000 real,
                                                          CUcontext* ctx, CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.retain_primary(dev, [&] { return real(ctx, dev); }) : real(ctx, dev);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxRelease_v2>::call(
    PFN_cuDevicePrimaryCtxRelease_v11000 real, CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.release_primary(dev, false, [&] { return real(dev); }) : real(dev);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxRelease>::call(PFN_cuDevicePrimaryCtxRelease_v7000 real,
                                                           CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.release_primary(dev, false, [&] { return real(dev); }) : real(dev);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxReset_v2>::call(PFN_cuDevicePrimaryCtxReset_v11000 real,
                                                            CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.release_primary(dev, true, [&] { return real(dev); }) : real(dev);
}

CUresult HookBody<HookId::cuDevicePrimaryCtxReset>::call(PFN_cuDevicePrimaryCtxReset_v7000 real,
                                                         CUdevice dev) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->contexts.release_primary(dev, true, [&] { return real(dev); }) : real(dev);
}

}  // namespace fracgpu::shim
