// Bodies of the gated hooks (the GATED rows of tables/hooks.def): ask the compute policy
// for the grant, submit, then count the submission for the in-flight bound
// (ComputePolicy::launch). Included at the end of hook_bodies.h so that hook_wrappers.cpp
// instantiates every wrapper with it. The locators say where a row's stream is.
// Cost while granted: see core/compute_policy.h (a few loads and one fetch_add), all
// inlined here; without a tenant, one load and the real call.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <tuple>

#include "core/hook_catalog.h"
#include "core/launch_profile.h"
#include "core/tenant_policies.h"
#include "tables/hook_kind.h"

namespace fracgpu::shim {

template <std::size_t I>
struct StreamAt {
  static constexpr bool kFenced = true;
  template <typename... Args>
  static CUstream get(Args... args) noexcept {
    return std::get<I>(std::tuple<Args...>(args...));
  }
};

struct LastStream {
  static constexpr bool kFenced = true;
  template <typename... Args>
  static CUstream get(Args... args) noexcept {
    return std::get<sizeof...(Args) - 1>(std::tuple<Args...>(args...));
  }
};

struct ConfigStream {
  static constexpr bool kFenced = true;
  template <typename... Args>
  static CUstream get(const CUlaunchConfig* config, Args...) noexcept {
    return config != nullptr ? config->hStream : nullptr;
  }
};

struct NoStream {
  static constexpr bool kFenced = false;
  template <typename... Args>
  static CUstream get(Args...) noexcept {
    return nullptr;
  }
};

template <HookId Id, typename Locator>
struct GatedBody {
  template <typename Real, typename... Args>
  static CUresult call(Real real, Args... args) noexcept {
    TenantPolicies* policies = tenant();
    if (policies == nullptr) {
      FRACGPU_LAUNCH_MARK(kSubmit);
      const CUresult rc = real(args...);
      FRACGPU_LAUNCH_MARK(kReal);
      return rc;
    }
    constexpr bool per_thread = hook_info(Id).per_thread_stream;
    const CUstream stream = Locator::get(args...);
    FRACGPU_LAUNCH_MARK(kPolicy);
    // Memory the shim moved to host comes back before anything can touch it.
    auto submit = [&] {
      SwapEngine::Section resident(policies->swap);
      FRACGPU_LAUNCH_MARK(kSubmit);
      const CUresult rc = real(args...);
      FRACGPU_LAUNCH_MARK(kReal);
      return rc;
    };
    if constexpr (Id == HookId::cuGraphLaunch || Id == HookId::cuGraphLaunch_ptsz) {
      return policies->launch_graph<Locator::kFenced>(std::get<0>(std::tuple<Args...>(args...)),
                                                      stream, per_thread, submit);
    } else {
      return policies->compute.launch<Locator::kFenced>(stream, per_thread, submit);
    }
  }
};

// A RESIDENT row (synchronous copies and memsets): no compute gate, only the swap section.
struct ResidentBody {
  template <typename Real, typename... Args>
  static CUresult call(Real real, Args... args) noexcept {
    TenantPolicies* policies = tenant();
    if (policies == nullptr) return real(args...);
    SwapEngine::Section resident(policies->swap);
    return real(args...);
  }
};

#define FRACGPU_GATED_FORWARD(symbol, pfn, locator)
#define FRACGPU_GATED_BODY(symbol, pfn, locator)
#define FRACGPU_GATED_GATED(symbol, pfn, locator) \
  template <>                                     \
  struct HookBody<HookId::symbol> : GatedBody<HookId::symbol, locator> {};
#define FRACGPU_GATED_RESIDENT(symbol, pfn, locator) \
  template <>                                        \
  struct HookBody<HookId::symbol> : ResidentBody {};
#define FRACGPU_HOOK(symbol, base, version, pt, kind) \
  FRACGPU_HOOK_KIND(FRACGPU_GATED, symbol, -, kind)
#include "tables/hooks.def"
#undef FRACGPU_HOOK
#undef FRACGPU_GATED_FORWARD
#undef FRACGPU_GATED_BODY
#undef FRACGPU_GATED_GATED
#undef FRACGPU_GATED_RESIDENT

}  // namespace fracgpu::shim
