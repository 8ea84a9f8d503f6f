// The hook catalog: tables/hooks.def turned into plain data (ids, exported names, the
// cuGetProcAddress base name, ABI version, per-thread-stream flag, kind) plus the lookups
// the shim needs. It carries no function types, so unit tests and tools can use it
// without the CUDA typedefs or any preloading.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "tables/hook_kind.h"

// cuda.h renames API functions with macros (cuMemAlloc -> cuMemAlloc_v2) unless
// __CUDA_API_VERSION_INTERNAL is defined; those macros would silently rename HookId
// enumerators, so every fracgpu target defines it (it also exposes the legacy PFN_
// typedefs the table needs).
#if defined(cuMemAlloc) || defined(cuCtxCreate)
#error "compile with -D__CUDA_API_VERSION_INTERNAL (cuda.h's API renaming macros are active)"
#endif

namespace fracgpu {

enum class HookId : uint16_t {
#define FRACGPU_HOOK(symbol, base, version, pt, kind) symbol,
#include "tables/hooks.def"
#undef FRACGPU_HOOK
};

// What the wrapper does (the kind column of tables/hooks.def).
enum class HookKind : uint8_t { kForward, kBody, kGated, kResident };

struct HookInfo {
  std::string_view symbol;  // exported ABI name, e.g. "cuMemAlloc_v2"
  std::string_view base;    // cuGetProcAddress name, e.g. "cuMemAlloc"
  int version;              // CUDA version that introduced this ABI, e.g. 3020
  bool per_thread_stream;   // a _ptsz/_ptds variant
  HookKind kind;
};

inline constexpr HookInfo kHookCatalog[] = {
#define FRACGPU_CATALOG_KIND_FORWARD(symbol, pfn, locator) HookKind::kForward
#define FRACGPU_CATALOG_KIND_BODY(symbol, pfn, locator) HookKind::kBody
#define FRACGPU_CATALOG_KIND_GATED(symbol, pfn, locator) HookKind::kGated
#define FRACGPU_CATALOG_KIND_RESIDENT(symbol, pfn, locator) HookKind::kResident
#define FRACGPU_HOOK(symbol, base, version, pt, kind) \
  {#symbol, #base, version, sizeof(#pt) > 1,          \
   FRACGPU_HOOK_KIND(FRACGPU_CATALOG_KIND, symbol, -, kind)},
#include "tables/hooks.def"
#undef FRACGPU_HOOK
#undef FRACGPU_CATALOG_KIND_FORWARD
#undef FRACGPU_CATALOG_KIND_BODY
#undef FRACGPU_CATALOG_KIND_GATED
#undef FRACGPU_CATALOG_KIND_RESIDENT
};

inline constexpr std::size_t kHookCount = sizeof(kHookCatalog) / sizeof(kHookCatalog[0]);

constexpr std::size_t hook_index(HookId id) {
  return static_cast<std::size_t>(id);
}
constexpr const HookInfo& hook_info(HookId id) {
  return kHookCatalog[hook_index(id)];
}

// The hook whose exported name is `symbol`, if it is hooked.
std::optional<HookId> find_hook_by_symbol(std::string_view symbol);

// The hook cuGetProcAddress must hand out for `base` at `cuda_version`: the newest ABI
// not newer than the requested version, the per-thread-stream variant when asked for
// and available. Empty when `base` is not hooked or no hooked ABI is old enough.
std::optional<HookId> select_hook_for_version(std::string_view base, int cuda_version,
                                              bool per_thread_stream);

}  // namespace fracgpu
