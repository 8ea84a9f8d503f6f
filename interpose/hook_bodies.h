// What each wrapper does between "ask the core" and "call the driver". The primary
// template forwards unchanged; a hook that carries policy gets an explicit
// specialisation declared here and defined in the file for its concern
// (proc_address_hooks.cpp, …). Declaring them all here guarantees that
// hook_wrappers.cpp instantiates every wrapper with its real body.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/hook_catalog.h"

namespace fracgpu::shim {

template <HookId Id>
struct HookBody {
  template <typename Real, typename... Args>
  static CUresult call(Real real, Args... args) noexcept {
    return real(args...);
  }
};

// cuGetProcAddress: hand out our wrapper for every hooked ABI (proc_address_hooks.cpp).
template <>
struct HookBody<HookId::cuGetProcAddress> {
  static CUresult call(PFN_cuGetProcAddress_v11030 real, const char* symbol, void** pfn,
                       int cuda_version, cuuint64_t flags) noexcept;
};
template <>
struct HookBody<HookId::cuGetProcAddress_v2> {
  static CUresult call(PFN_cuGetProcAddress_v12000 real, const char* symbol, void** pfn,
                       int cuda_version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult* status) noexcept;
};

}  // namespace fracgpu::shim
