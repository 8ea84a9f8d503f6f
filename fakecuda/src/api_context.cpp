// Context entry points: primary contexts, created contexts (all four cuCtxCreate
// ABIs), the current-context stack and per-context settings (limits, cache config,
// flags, peer access). The context logic itself lives in context.cpp.
#include <array>

#include "api_support.h"
#include "capture.h"

using namespace fakecuda;

namespace {

constexpr unsigned kContextApiVersion = 3020;

// Default value of each CUlimit, in enum order.
constexpr std::array<size_t, CU_LIMIT_MAX> kDefaultLimits = {1024, 1 << 20, 8 << 20, 2, 2048,
                                                             64,   0,       0,       0, 0};

CUresult create_and_push(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::shared_ptr<Context> context;
    CUresult status = create_context(driver, driver.physical(dev), flags, false, context);
    if (status != CUDA_SUCCESS) return status;
    push_current_context(context->handle());
    *pctx = context->handle();
    return CUDA_SUCCESS;
  });
}

CUresult destroy(CUcontext ctx) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Context> context = driver.handles.get<Context>(ctx);
    if (!context) return CUDA_ERROR_INVALID_CONTEXT;
    if (context->primary())
      return CUDA_ERROR_INVALID_CONTEXT;  // primary contexts are released, not destroyed
    destroy_context(driver, context);
    return CUDA_SUCCESS;
  });
}

CUresult push(CUcontext ctx) {
  return with_driver([&](Driver& driver) {
    if (!driver.handles.get<Context>(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    push_current_context(ctx);
    return CUDA_SUCCESS;
  });
}

CUresult pop(CUcontext* pctx) {
  return with_driver([&](Driver&) {
    CUcontext popped = pop_current_context();
    if (popped == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    if (pctx != nullptr) *pctx = popped;
    return CUDA_SUCCESS;
  });
}

template <typename Body>
CUresult with_primary_device(CUdevice dev, Body&& body) {
  return with_driver([&](Driver& driver) {
    if (!driver.valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    return body(driver, driver.physical(dev));
  });
}

CUresult set_primary_flags(CUdevice dev, unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_primary_device(dev, [&](Driver& driver, uint32_t device) {
    PrimaryContextSlot& slot = driver.primary_contexts[device];
    std::lock_guard lock(slot.mutex);
    slot.flags = flags;
    if (slot.context) slot.context->set_flags(flags);
    return CUDA_SUCCESS;
  });
}

}  // namespace

// --- primary contexts -------------------------------------------------------------

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_primary_device(dev, [&](Driver& driver, uint32_t device) {
    return retain_primary_context(driver, device, *pctx);
  });
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return with_primary_device(
      dev, [](Driver& driver, uint32_t device) { return release_primary_context(driver, device); });
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxRelease(CUdevice dev) {
  return fakecuda_impl_cuDevicePrimaryCtxRelease_v2(dev);
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return with_primary_device(
      dev, [](Driver& driver, uint32_t device) { return reset_primary_context(driver, device); });
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxReset(CUdevice dev) {
  return fakecuda_impl_cuDevicePrimaryCtxReset_v2(dev);
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return set_primary_flags(dev, flags);
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return set_primary_flags(dev, flags);
}

extern "C" CUresult fakecuda_impl_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags,
                                                             int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_primary_device(dev, [&](Driver& driver, uint32_t device) {
    PrimaryContextSlot& slot = driver.primary_contexts[device];
    std::lock_guard lock(slot.mutex);
    *flags = slot.flags;
    *active = slot.context ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

// --- created contexts ---------------------------------------------------------------

extern "C" CUresult fakecuda_impl_cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_and_push(pctx, flags, dev);
}

extern "C" CUresult fakecuda_impl_cuCtxCreate_v2(CUcontext* pctx, unsigned int flags,
                                                 CUdevice dev) {
  return create_and_push(pctx, flags, dev);
}

extern "C" CUresult fakecuda_impl_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray,
                                                 int numParams, unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (numParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
  return create_and_push(pctx, flags, dev);
}

extern "C" CUresult fakecuda_impl_cuCtxCreate_v4(CUcontext* pctx,
                                                 CUctxCreateParams* ctxCreateParams,
                                                 unsigned int flags, CUdevice dev) {
  if (ctxCreateParams != nullptr) {
    if (ctxCreateParams->numExecAffinityParams > 0) return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    if (ctxCreateParams->cigParams != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  }
  return create_and_push(pctx, flags, dev);
}

extern "C" CUresult fakecuda_impl_cuCtxDestroy_v2(CUcontext ctx) {
  return destroy(ctx);
}
extern "C" CUresult fakecuda_impl_cuCtxDestroy(CUcontext ctx) {
  return destroy(ctx);
}
extern "C" CUresult fakecuda_impl_cuCtxPushCurrent_v2(CUcontext ctx) {
  return push(ctx);
}
extern "C" CUresult fakecuda_impl_cuCtxPushCurrent(CUcontext ctx) {
  return push(ctx);
}
extern "C" CUresult fakecuda_impl_cuCtxPopCurrent_v2(CUcontext* pctx) {
  return pop(pctx);
}
extern "C" CUresult fakecuda_impl_cuCtxPopCurrent(CUcontext* pctx) {
  return pop(pctx);
}

extern "C" CUresult fakecuda_impl_cuCtxSetCurrent(CUcontext ctx) {
  return with_driver([&](Driver& driver) {
    if (ctx != nullptr && !driver.handles.get<Context>(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    set_current_context(ctx);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver&) {
    std::shared_ptr<Context> context = current_context();
    *pctx = context ? context->handle() : nullptr;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    *device = static_cast<CUdevice>(driver.ordinal_of(context.device()));
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (ctx == nullptr) return fakecuda_impl_cuCtxGetDevice(device);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Context> context = driver.handles.get<Context>(ctx);
    if (!context) return CUDA_ERROR_INVALID_CONTEXT;
    *device = static_cast<CUdevice>(driver.ordinal_of(context->device()));
    return CUDA_SUCCESS;
  });
}

namespace {

// Synchronising a context is potentially unsafe, and conflicts with a capture of one of
// its streams in every mode (see capture.h).
CUresult synchronize(Context& context) {
  CUresult status = check_context_wait(context.handle());
  return status != CUDA_SUCCESS ? status : context.synchronize();
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuCtxSynchronize() {
  return with_context([](Driver&, Context& context) { return synchronize(context); });
}

extern "C" CUresult fakecuda_impl_cuCtxSynchronize_v2(CUcontext ctx) {
  if (ctx == nullptr) return fakecuda_impl_cuCtxSynchronize();
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Context> context = driver.handles.get<Context>(ctx);
    return context ? synchronize(*context) : CUDA_ERROR_INVALID_CONTEXT;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Context> context =
        ctx != nullptr ? driver.handles.get<Context>(ctx) : current_context();
    if (!context) return CUDA_ERROR_INVALID_CONTEXT;
    *version = kContextApiVersion;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver&, Context& context) {
    *flags = context.flags();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxSetFlags(unsigned int flags) {
  if ((flags & ~static_cast<unsigned>(CU_CTX_FLAGS_MASK)) != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver&, Context& context) {
    context.set_flags(flags);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Context> context =
        ctx != nullptr ? driver.handles.get<Context>(ctx) : current_context();
    if (!context) return CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = context->id();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr || limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver&, Context& context) {
    std::lock_guard lock(context.settings_mutex);
    auto it = context.limits.find(limit);
    *pvalue = it != context.limits.end() ? it->second : kDefaultLimits[limit];
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxSetLimit(CUlimit limit, size_t value) {
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)
    return CUDA_ERROR_INVALID_VALUE;  // query-only
  return with_context([&](Driver&, Context& context) {
    std::lock_guard lock(context.settings_mutex);
    context.limits[limit] = value;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver&, Context& context) {
    std::lock_guard lock(context.settings_mutex);
    *pconfig = context.cache_config;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxSetCacheConfig(CUfunc_cache config) {
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)
    return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver&, Context& context) {
    std::lock_guard lock(context.settings_mutex);
    context.cache_config = config;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxGetStreamPriorityRange(int* leastPriority,
                                                              int* greatestPriority) {
  return with_context([&](Driver&, Context&) {
    if (leastPriority != nullptr) *leastPriority = 0;
    if (greatestPriority != nullptr) *greatestPriority = -5;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context& context) {
    std::shared_ptr<Context> peer = driver.handles.get<Context>(peerContext);
    if (!peer) return CUDA_ERROR_INVALID_CONTEXT;
    if (peer->device() == context.device()) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard lock(context.settings_mutex);
    if (!context.peers.insert(peerContext).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxDisablePeerAccess(CUcontext peerContext) {
  return with_context([&](Driver&, Context& context) {
    std::lock_guard lock(context.settings_mutex);
    return context.peers.erase(peerContext) != 0 ? CUDA_SUCCESS
                                                 : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  });
}

extern "C" CUresult fakecuda_impl_cuCtxResetPersistingL2Cache() {
  return with_context([](Driver&, Context&) { return CUDA_SUCCESS; });
}
