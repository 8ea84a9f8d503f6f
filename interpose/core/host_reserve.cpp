// The swap reserve's book (see host_reserve.h).
#include "core/host_reserve.h"

#include <algorithm>
#include <bit>

namespace fracgpu {

void HostReserve::add_slab(void* base) {
  if (slabs_.emplace(reinterpret_cast<uintptr_t>(base), kAllFree).second)
    free_granules_ += kGranulesPerSlab;
}

unsigned HostReserve::take_run(uintptr_t base, uint32_t& mask, unsigned granules,
                               uint64_t bytes_left, std::vector<HostChunk>* out) {
  const unsigned first = static_cast<unsigned>(std::countr_zero(mask));
  if (first >= kGranulesPerSlab) return 0;
  // The run of free granules starting at `first` (the shift brings in used, zero, bits).
  const unsigned run = static_cast<unsigned>(std::countr_one(mask >> first));
  const unsigned taken = std::min(run, granules);
  const uint32_t bits = (taken == 32 ? kAllFree : ((1u << taken) - 1u)) << first;
  mask &= ~bits;
  free_granules_ -= taken;
  HostChunk piece;
  piece.base = reinterpret_cast<void*>(base + uint64_t{first} * kGranule);
  piece.capacity = uint64_t{taken} * kGranule;
  piece.bytes = std::min(piece.capacity, bytes_left);
  piece.reserve = true;
  out->push_back(piece);
  return taken;
}

uint64_t HostReserve::take(uint64_t size, std::vector<HostChunk>* out) {
  uint64_t left = size;
  auto granules_for = [](uint64_t bytes) {
    return static_cast<unsigned>(std::min<uint64_t>((bytes + kGranule - 1) / kGranule, ~0u));
  };
  // Whole free slabs first (the fewest, largest copies), then the runs of partly used ones.
  for (auto& [base, mask] : slabs_) {
    if (left == 0) break;
    if (mask != kAllFree) continue;
    const unsigned taken = take_run(base, mask, granules_for(left), left, out);
    left -= std::min(left, uint64_t{taken} * kGranule);
  }
  for (auto& [base, mask] : slabs_) {
    while (left > 0 && mask != 0) {
      const unsigned taken = take_run(base, mask, granules_for(left), left, out);
      left -= std::min(left, uint64_t{taken} * kGranule);
    }
    if (left == 0) break;
  }
  return size - left;
}

void HostReserve::give_back(const HostChunk& piece) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(piece.base);
  auto it = slabs_.upper_bound(address);
  if (it == slabs_.begin()) return;
  --it;
  if (address >= it->first + kSlabBytes) return;
  const unsigned first = static_cast<unsigned>((address - it->first) / kGranule);
  const unsigned count = static_cast<unsigned>(
      std::min<uint64_t>(piece.capacity / kGranule, kGranulesPerSlab - first));
  if (count == 0) return;
  const uint32_t bits = (count == 32 ? kAllFree : ((1u << count) - 1u)) << first;
  free_granules_ += static_cast<unsigned>(std::popcount(bits & ~it->second));
  it->second |= bits;
}

bool HostReserve::owns(const void* address) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(address);
  auto it = slabs_.upper_bound(a);
  if (it == slabs_.begin()) return false;
  --it;
  return a < it->first + kSlabBytes;
}

std::vector<void*> HostReserve::remove_free_slabs(uint64_t keep) {
  std::vector<void*> removed;
  // The highest addresses first: what stays is the older, lower part (no reason beyond
  // a stable choice).
  for (auto it = slabs_.end(); it != slabs_.begin() && free_bytes() > keep;) {
    --it;
    if (it->second != kAllFree || free_bytes() - kSlabBytes < keep) continue;
    removed.push_back(reinterpret_cast<void*>(it->first));
    free_granules_ -= kGranulesPerSlab;
    it = slabs_.erase(it);
  }
  return removed;
}

std::vector<void*> HostReserve::remove_all() {
  std::vector<void*> removed;
  for (const auto& [base, mask] : slabs_) removed.push_back(reinterpret_cast<void*>(base));
  slabs_.clear();
  free_granules_ = 0;
  return removed;
}

}  // namespace fracgpu
