// What cuGetProcAddress hands back. The driver is asked first — it knows which ABI a
// given cudaVersion and stream mode must receive — and its answer is then mapped onto
// our wrapper for that exact ABI: by pointer identity with the exported function we
// resolved for each hook (exact whenever the driver returns its exported entry points),
// else by name, version and stream mode from the catalog. Pointers the driver returns
// for functions we do not hook are handed out unchanged, so the runtime calls the
// driver directly with no forwarding cost.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/hook_catalog.h"

namespace fracgpu {

// Same value as CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in cuda.h (checked there).
inline constexpr uint64_t kProcAddressPerThreadStreamFlag = 1u << 1;

class ProcAddressResolver {
 public:
  struct Stats {
    uint64_t by_pointer = 0;      // driver's pointer was one of our hooked real functions
    uint64_t by_name = 0;         // matched through the catalog (driver used another pointer)
    uint64_t passed_through = 0;  // not hooked: the driver's pointer is returned
  };

  // real[i] / wrapper[i]: the driver's function and our wrapper for hook i. A null real
  // pointer (driver lacks that ABI) is never matched.
  // newest_known_version: the CUDA version of the headers the shim was built with. The
  // name fallback is used only for requests up to it: a newer request may be answered
  // with an ABI the catalog has never seen, which must not get a wrapper of an older one.
  void build(const std::array<void*, kHookCount>& real,
             const std::array<void*, kHookCount>& wrapper, int newest_known_version);

  void* translate(std::string_view symbol, void* driver_fn, int cuda_version, uint64_t flags);

  Stats stats() const;

 private:
  std::array<std::pair<const void*, uint16_t>, kHookCount> by_real_{};
  std::size_t real_count_ = 0;
  std::array<void*, kHookCount> wrapper_{};
  std::array<bool, kHookCount> has_real_{};
  int newest_known_version_ = 0;
  std::atomic<uint64_t> by_pointer_{0}, by_name_{0}, passed_through_{0};
};

}  // namespace fracgpu
