// Bodies of the gated hooks (gated_hooks.def): ask the compute policy for the grant,
// submit, then count the submission for the in-flight bound. Included at the end of
// hook_bodies.h so that hook_wrappers.cpp instantiates every wrapper with it.
// Cost while granted: see compute_policy.h (a few loads and one fetch_add).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <tuple>

#include "compute_policy.h"
#include "core/hook_catalog.h"
#include "graph_memory.h"

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
    if constexpr (Id == HookId::cuGraphLaunch || Id == HookId::cuGraphLaunch_ptsz) {
      // A graph's memory nodes are charged when its launch makes the driver back them.
      if (MemoryPolicy* memory = MemoryPolicy::active())
        return GraphMemory::instance().launch(*memory, std::get<0>(std::tuple<Args...>(args...)),
                                              [&] { return gated(real, args...); });
    }
    return gated(real, args...);
  }

  template <typename Real, typename... Args>
  static CUresult gated(Real real, Args... args) noexcept {
    ComputePolicy* policy = ComputePolicy::active();
    if (policy == nullptr) return real(args...);
    constexpr bool per_thread = hook_info(Id).per_thread_stream;
    const CUstream stream = Locator::get(args...);
    const int index = policy->before_launch(stream, per_thread);
    const CUresult rc = real(args...);
    if constexpr (Locator::kFenced) policy->after_launch(index, stream, per_thread, rc);
    return rc;
  }
};

#define FRACGPU_GATED(symbol, locator) \
  template <>                          \
  struct HookBody<HookId::symbol> : GatedBody<HookId::symbol, locator> {};
#include "gated_hooks.def"
#undef FRACGPU_GATED

}  // namespace fracgpu::shim
