// Implementation of AllocationTable (see allocation_table.h).
#include "core/allocation_table.h"

namespace fracgpu {

std::optional<ChargedAllocation> AllocationTable::insert(uint64_t key,
                                                         const ChargedAllocation& allocation) {
  Shard& shard = shards_[shard_of(key)];
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto [it, inserted] = shard.entries.try_emplace(key, allocation);
  if (inserted) return std::nullopt;
  ChargedAllocation previous = it->second;
  it->second = allocation;
  return previous;
}

std::optional<ChargedAllocation> AllocationTable::erase(uint64_t key) {
  Shard& shard = shards_[shard_of(key)];
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return std::nullopt;
  ChargedAllocation found = it->second;
  shard.entries.erase(it);
  return found;
}

std::optional<ChargedAllocation> AllocationTable::find(uint64_t key) const {
  const Shard& shard = shards_[shard_of(key)];
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return std::nullopt;
  return it->second;
}

std::vector<ChargedAllocation> AllocationTable::erase_owned_by(uint64_t owner) {
  std::vector<ChargedAllocation> removed;
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    for (auto it = shard.entries.begin(); it != shard.entries.end();) {
      if (it->second.owner == owner) {
        removed.push_back(it->second);
        it = shard.entries.erase(it);
      } else {
        ++it;
      }
    }
  }
  return removed;
}

std::size_t AllocationTable::size() const {
  std::size_t n = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    n += shard.entries.size();
  }
  return n;
}

}  // namespace fracgpu
