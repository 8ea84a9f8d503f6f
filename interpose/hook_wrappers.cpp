// The wrappers: one typed function per row of tables/hooks.def, generated from the row's
// PFN_ typedef (cudaTypedefs.h), and the hidden pointer each exported trampoline in
// exports_x86_64.S jumps through. A wrapper is the whole fast path of a hooked call:
// initialisation check (one acquire load), optional counter (one relaxed load), the
// re-entry check (one TLS load), then the hook's body.
#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/hook_stats.h"
#include "core/launch_profile.h"
#include "core/shim_log.h"
#include "hook_bodies.h"
#include "reentry_guard.h"
#include "shim_runtime.h"

namespace fracgpu::shim {
namespace {

// The driver lacks this ABI (older driver) or no driver was found at all.
CUresult missing_driver_function(HookId id) noexcept {
  const bool no_driver = state() == nullptr || state()->driver_handle == nullptr;
  warn_unavailable(hook_info(id).symbol);
  if (no_driver) return id == HookId::cuInit ? CUDA_ERROR_NO_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
  return CUDA_ERROR_NOT_FOUND;
}

template <HookId Id, typename Fn>
struct Wrapper;

template <HookId Id, typename... Args>
struct Wrapper<Id, CUresult(CUDAAPI*)(Args...)> {
  static CUresult CUDAAPI call(Args... args) noexcept {
#ifdef FRACGPU_LAUNCH_PROFILE
    if constexpr (Id == HookId::cuLaunchKernel) {
      launch_profile::begin();
      const CUresult rc = hooked(args...);
      launch_profile::end();
      return rc;
    }
#endif
    return hooked(args...);
  }
  // Inlined into call().
  __attribute__((always_inline)) static CUresult hooked(Args... args) noexcept {
    ensure_initialized();
    HookStats::count(Id);
    auto real = reinterpret_cast<CUresult(CUDAAPI*)(Args...)>(g_real_functions[hook_index(Id)]);
    if (__builtin_expect(real == nullptr, 0)) return missing_driver_function(Id);
    if (ReentryGuard::inside() || !g_hooks_active) return real(args...);
    ReentryGuard guard;
    FRACGPU_LAUNCH_MARK(kBody);
    return HookBody<Id>::call(real, args...);
  }
};

}  // namespace
}  // namespace fracgpu::shim

// Targets of the exported trampolines. constinit: fixed at link time, no start-up code.
extern "C" {
#define FRACGPU_HOOK(symbol, base, version, pt, kind)                                              \
  __attribute__((visibility(                                                                       \
      "hidden"))) extern constinit PFN_##base##_v##version##pt const fracgpu_hook_target_##symbol; \
  constinit PFN_##base##_v##version##pt const fracgpu_hook_target_##symbol =                       \
      &fracgpu::shim::Wrapper<fracgpu::HookId::symbol, PFN_##base##_v##version##pt>::call;
#include "tables/hooks.def"
#undef FRACGPU_HOOK
}

namespace fracgpu::shim {

std::array<void*, kHookCount> wrapper_addresses() noexcept {
  return {
#define FRACGPU_HOOK(symbol, base, version, pt, kind) \
  reinterpret_cast<void*>(fracgpu_hook_target_##symbol),
#include "tables/hooks.def"
#undef FRACGPU_HOOK
  };
}

}  // namespace fracgpu::shim
