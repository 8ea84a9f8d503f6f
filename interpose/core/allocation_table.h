// AllocationTable: what the shim charged for each live allocation, so that a free —
// which names only a pointer or handle — releases exactly what was reserved. Sharded
// by key so that threads allocating concurrently rarely meet on a lock: an insert or
// erase is one uncontended mutex and one hash-map operation (~50 ns).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace fracgpu {

struct ChargedAllocation {
  uint32_t device = 0;  // index into the tenant's quota devices
  uint64_t bytes = 0;   // what the ledger was charged
  uint64_t owner = 0;   // e.g. the memory pool of a stream-ordered allocation
};

class AllocationTable {
 public:
  // Stores the row; returns the row it replaced, if any (an address the driver reused:
  // the old allocation is gone, e.g. freed by a context reset).
  std::optional<ChargedAllocation> insert(uint64_t key, const ChargedAllocation& allocation);
  std::optional<ChargedAllocation> erase(uint64_t key);
  std::optional<ChargedAllocation> find(uint64_t key) const;
  // Every entry with the given owner, removed (e.g. allocations of a destroyed pool).
  std::vector<ChargedAllocation> erase_owned_by(uint64_t owner);
  std::size_t size() const;

 private:
  static constexpr std::size_t kShards = 64;
  struct Shard {
    mutable std::mutex mutex;
    std::unordered_map<uint64_t, ChargedAllocation> entries;
  };
  static std::size_t shard_of(uint64_t key) { return (key >> 9 ^ key >> 21) % kShards; }
  std::array<Shard, kShards> shards_;
};

}  // namespace fracgpu
