// What each wrapper does between "ask the core" and "call the driver", declared from the
// kind column of tables/hooks.def: the primary template forwards unchanged (FORWARD); a
// BODY row gets an explicit specialisation here, its signature taken from the row's
// PFN_ typedef, defined in the file for its concern (proc_address_hooks.cpp, ipc_hooks.cpp,
// memory_hooks.cpp, vmm_hooks.cpp, context_hooks.cpp, pool_hooks.cpp, capture_hooks.cpp)
// as one call into the tenant's policies (core/tenant_policies.h); a GATED row gets the
// gated body of launch_hooks.h. Declaring them all here guarantees that hook_wrappers.cpp
// instantiates every wrapper with its real body: a BODY row without a definition fails
// the link (-z defs), a definition without a BODY row fails to compile.
// Cost: none of its own (the bodies are called directly by the wrappers).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/hook_catalog.h"
#include "core/tenant_policies.h"
#include "tables/hook_kind.h"

namespace fracgpu::shim {

template <HookId Id>
struct HookBody {
  template <typename Real, typename... Args>
  static CUresult call(Real real, Args... args) noexcept {
    return real(args...);
  }
};

// The signature of a body: the real function first, then the hook's own parameters.
template <typename Fn>
struct BodySignature;
template <typename... Args>
struct BodySignature<CUresult(CUDAAPI*)(Args...)> {
  using Type = CUresult(CUresult(CUDAAPI*)(Args...), Args...) noexcept;
};

// The tenant's policies, or null when this process belongs to no tenant (shim_runtime.cpp).
TenantPolicies* tenant() noexcept;

#define FRACGPU_BODY_FORWARD(symbol, pfn, locator)
#define FRACGPU_BODY_GATED(symbol, pfn, locator)
#define FRACGPU_BODY_RESIDENT(symbol, pfn, locator)
#define FRACGPU_BODY_BODY(symbol, pfn, locator) \
  template <>                                   \
  struct HookBody<HookId::symbol> {             \
    static BodySignature<pfn>::Type call;       \
  };
#define FRACGPU_HOOK(symbol, base, version, pt, kind) \
  FRACGPU_HOOK_KIND(FRACGPU_BODY, symbol, PFN_##base##_v##version##pt, kind)
#include "tables/hooks.def"
#undef FRACGPU_HOOK
#undef FRACGPU_BODY_FORWARD
#undef FRACGPU_BODY_GATED
#undef FRACGPU_BODY_RESIDENT
#undef FRACGPU_BODY_BODY

}  // namespace fracgpu::shim

// launch_hooks.h: the gated hooks (kernel launches, graphs, asynchronous copies/sets).
#include "launch_hooks.h"
