// Mapping of cuGetProcAddress results onto the shim's wrappers (see the header).
#include "core/proc_address_resolver.h"

#include <algorithm>

namespace fracgpu {

void ProcAddressResolver::build(const std::array<void*, kHookCount>& real,
                                const std::array<void*, kHookCount>& wrapper,
                                int newest_known_version) {
  newest_known_version_ = newest_known_version;
  real_count_ = 0;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    wrapper_[i] = wrapper[i];
    has_real_[i] = real[i] != nullptr;
    if (real[i] != nullptr) by_real_[real_count_++] = {real[i], static_cast<uint16_t>(i)};
  }
  std::sort(by_real_.begin(), by_real_.begin() + static_cast<std::ptrdiff_t>(real_count_));
}

void* ProcAddressResolver::translate(std::string_view symbol, void* driver_fn, int cuda_version,
                                     uint64_t flags) {
  if (driver_fn == nullptr) return nullptr;
  auto end = by_real_.begin() + static_cast<std::ptrdiff_t>(real_count_);
  auto it = std::lower_bound(by_real_.begin(), end,
                             std::make_pair(static_cast<const void*>(driver_fn), uint16_t{0}));
  if (it != end && it->first == driver_fn) {
    by_pointer_.fetch_add(1, std::memory_order_relaxed);
    return wrapper_[it->second];
  }
  const bool per_thread = (flags & kProcAddressPerThreadStreamFlag) != 0;
  auto id = cuda_version <= newest_known_version_
                ? select_hook_for_version(symbol, cuda_version, per_thread)
                : std::nullopt;
  if (id && has_real_[hook_index(*id)]) {
    by_name_.fetch_add(1, std::memory_order_relaxed);
    return wrapper_[hook_index(*id)];
  }
  passed_through_.fetch_add(1, std::memory_order_relaxed);
  return driver_fn;
}

ProcAddressResolver::Stats ProcAddressResolver::stats() const {
  return {by_pointer_.load(std::memory_order_relaxed), by_name_.load(std::memory_order_relaxed),
          passed_through_.load(std::memory_order_relaxed)};
}

}  // namespace fracgpu
