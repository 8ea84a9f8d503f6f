// Per-hook call counters, so tests and operators can prove that a program's calls
// really went through the shim. Off unless FRACGPU_HOOK_STATS names a file; the cost
// when off is one relaxed load and a predictable branch per hooked call. When on, the
// counts are written as JSON to that file when the process exits.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "core/hook_catalog.h"
#include "core/proc_address_resolver.h"

namespace fracgpu {

class HookStats {
 public:
  static void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  static bool enabled() { return enabled_.load(std::memory_order_relaxed); }

  static void count(HookId id) {
    if (__builtin_expect(enabled_.load(std::memory_order_relaxed), 0)) {
      counts_[hook_index(id)].fetch_add(1, std::memory_order_relaxed);
    }
  }

  static uint64_t get(HookId id) { return counts_[hook_index(id)].load(std::memory_order_relaxed); }

  // {"pid":…, "driver":"…", "hooks":{"cuMemAlloc_v2":3, …}, "proc_address":{…}} —
  // only hooks that were called are listed.
  static std::string to_json(int pid, const std::string& driver_path,
                             const ProcAddressResolver::Stats& proc_address);

  // Writes to_json() to `path` (created or truncated, mode 0644). False on I/O error.
  static bool write_file(const std::string& path, const std::string& json);

 private:
  static inline std::atomic<bool> enabled_{false};
  static inline std::array<std::atomic<uint64_t>, kHookCount> counts_{};
};

}  // namespace fracgpu
