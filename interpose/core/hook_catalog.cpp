// Lookups over the hook catalog. Called on cuGetProcAddress (tens to hundreds of
// times at start-up, never on a hot path), so a linear scan of ~110 rows is fine.
#include "core/hook_catalog.h"

namespace fracgpu {

std::optional<HookId> find_hook_by_symbol(std::string_view symbol) {
  for (std::size_t i = 0; i < kHookCount; ++i) {
    if (kHookCatalog[i].symbol == symbol) return static_cast<HookId>(i);
  }
  return std::nullopt;
}

std::optional<HookId> select_hook_for_version(std::string_view base, int cuda_version,
                                              bool per_thread_stream) {
  std::optional<HookId> best_default;
  std::optional<HookId> best_per_thread;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    const HookInfo& info = kHookCatalog[i];
    if (info.base != base || info.version > cuda_version) continue;
    std::optional<HookId>& best = info.per_thread_stream ? best_per_thread : best_default;
    if (!best || hook_info(*best).version < info.version) best = static_cast<HookId>(i);
  }
  if (per_thread_stream && best_per_thread) return best_per_thread;
  return best_default;
}

}  // namespace fracgpu
