// Process-wide state of the shim and its one-time initialisation. Nothing happens at
// load time: the first call into any CUDA entry point runs initialize_slow() exactly
// once (std::call_once), which reads the configuration, loads the real driver and
// resolves every hooked function. Afterwards ensure_initialized() costs one acquire
// load. The state is heap-allocated and never freed, so no destructor can run while
// another thread is still inside the driver during exit.
#pragma once

#include <array>
#include <atomic>
#include <string>
#include <string_view>

#include "core/hook_catalog.h"
#include "core/proc_address_resolver.h"
#include "core/shim_config.h"
#include "core/tenant_policies.h"
#include "core/tenant_session.h"

namespace fracgpu::shim {

struct ShimState {
  ShimConfig config;
  void* driver_handle = nullptr;  // the real libcuda, null when none was found
  std::string driver_path;
  ProcAddressResolver proc_address;
};

// Resolved real driver functions, indexed by HookId; null = driver lacks that ABI.
extern std::array<void*, kHookCount> g_real_functions;
extern std::atomic<bool> g_initialized;
// False under FRACGPU_DISABLE=1: every wrapper then only forwards.
extern bool g_hooks_active;

void initialize_slow() noexcept;

inline void ensure_initialized() noexcept {
  if (__builtin_expect(!g_initialized.load(std::memory_order_acquire), 0)) initialize_slow();
}

// Null before initialisation.
ShimState* state() noexcept;

// The tenant this process belongs to: its registration and the policies every hook body
// calls into. Null when it belongs to none (or before initialisation): bodies forward.
TenantSession* tenant_session() noexcept;
TenantPolicies* tenant() noexcept;

// One capped warning for a driver function that cannot be called: missing from an older
// driver, or no driver at all (none found, or closed off because the broker is gone, which
// an error line has already said).
void warn_unavailable(std::string_view symbol) noexcept;

// Our wrapper for each hook (what cuGetProcAddress hands out), from hook_wrappers.cpp.
std::array<void*, kHookCount> wrapper_addresses() noexcept;

}  // namespace fracgpu::shim
