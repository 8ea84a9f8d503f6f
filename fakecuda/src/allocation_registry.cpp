// Address-range lookups for known memory (see allocation_registry.h).
#include "allocation_registry.h"

#include <mutex>

namespace fakecuda {

void AllocationRegistry::insert(const Allocation& allocation) {
  std::unique_lock lock(mutex_);
  by_base_[allocation.base] = allocation;
}

std::map<uintptr_t, Allocation>::const_iterator AllocationRegistry::locate(uintptr_t p) const {
  auto it = by_base_.upper_bound(p);
  if (it == by_base_.begin()) return by_base_.end();
  --it;
  if (p - it->second.base < it->second.size) return it;
  return by_base_.end();
}

std::optional<Allocation> AllocationRegistry::find(uintptr_t p) const {
  std::shared_lock lock(mutex_);
  auto it = locate(p);
  if (it == by_base_.end()) return std::nullopt;
  return it->second;
}

bool AllocationRegistry::covers(uintptr_t p, size_t bytes) const {
  std::shared_lock lock(mutex_);
  auto it = locate(p);
  if (it == by_base_.end()) return false;
  return bytes <= it->second.size - (p - it->second.base);
}

bool AllocationRegistry::overlaps(uintptr_t p, size_t bytes) const {
  std::shared_lock lock(mutex_);
  if (locate(p) != by_base_.end()) return true;
  auto after = by_base_.upper_bound(p);  // the first allocation starting past p
  return after != by_base_.end() && after->first - p < bytes;
}

bool AllocationRegistry::update(uintptr_t base, const std::function<void(Allocation&)>& change) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return false;
  change(it->second);
  return true;
}

std::optional<Allocation> AllocationRegistry::take(uintptr_t base) {
  std::unique_lock lock(mutex_);
  auto it = by_base_.find(base);
  if (it == by_base_.end()) return std::nullopt;
  Allocation allocation = it->second;
  by_base_.erase(it);
  return allocation;
}

std::vector<Allocation> AllocationRegistry::take_if(
    const std::function<bool(const Allocation&)>& predicate) {
  std::unique_lock lock(mutex_);
  std::vector<Allocation> taken;
  for (auto it = by_base_.begin(); it != by_base_.end();) {
    if (predicate(it->second)) {
      taken.push_back(it->second);
      it = by_base_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

}  // namespace fakecuda
