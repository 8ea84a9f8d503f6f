// HostReserve: the book of a process's swap reserve — host memory pinned ahead of a
// swap-out, so that the swap-out copies at the host link's speed instead of waiting for
// pages to be faulted in and registered (docs/design.md "Overcommit and swap"; the broker
// sets how much a tenant may hold: DeviceQuota.host_reserve, include/fracgpu/tenant_segment.h).
//
// The reserve is made of slabs of kSlabBytes, each one mapping registered with the driver
// as a whole (core/host_staging.h pins them). A host copy takes pieces of slabs: runs of
// free kGranule granules, each piece inside one slab (so each is one copy within one
// registration); its free returns them. A slab is unregistered only when all of it is
// free and the reserve is larger than wanted. Allocations the swap engine backs are whole
// multiples of the VMM granularity (2 MiB), so pieces waste nothing but the rounding of an
// allocation of another size.
//
// Pure bookkeeping: no driver call, no lock (HostStaging holds its keep mutex around every
// call). Cost: take() scans the slabs' free masks, O(slabs) per allocation moved (a
// 100 GiB reserve has 1,600 slabs: microseconds beside a copy of milliseconds).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace fracgpu {

// One piece of an allocation's host copy.
struct HostChunk {
  void* base = nullptr;
  uint64_t capacity = 0;    // bytes mapped or allocated: what is unregistered and freed
  uint64_t bytes = 0;       // bytes of the allocation it holds (<= capacity)
  bool host_alloc = false;  // cuMemHostAlloc'd (cuMemFreeHost), else mmap'd and registered
  bool reserve = false;     // a piece of a reserve slab: goes back to the reserve
};

class HostReserve {
 public:
  static constexpr uint64_t kSlabBytes = 64ull << 20;
  static constexpr uint64_t kGranule = 2ull << 20;
  static constexpr unsigned kGranulesPerSlab = kSlabBytes / kGranule;  // 32: one mask word
  static_assert(kGranulesPerSlab == 32);

  // A slab of kSlabBytes at `base`, pinned by the caller, all of it free.
  void add_slab(void* base);
  // Takes pieces for the first bytes of a host copy of `size`: appended to *out in order
  // (each: base, bytes it holds, capacity in whole granules, `reserve` set). Returns the
  // bytes they hold (<= size; less when the reserve has less free).
  uint64_t take(uint64_t size, std::vector<HostChunk>* out);
  // A piece take() handed out comes back free.
  void give_back(const HostChunk& piece);
  bool owns(const void* address) const;
  // Takes fully free slabs out while more than `keep` bytes are free: their bases (the
  // caller unregisters and unmaps them).
  std::vector<void*> remove_free_slabs(uint64_t keep);
  // Every slab, free or not, taken out (a forked child drops its parent's).
  std::vector<void*> remove_all();

  uint64_t capacity() const { return slabs_.size() * kSlabBytes; }
  uint64_t free_bytes() const { return free_granules_ * kGranule; }
  std::size_t slabs() const { return slabs_.size(); }

 private:
  static constexpr uint32_t kAllFree = ~0u;
  // Takes up to `granules` from the first run of free granules of `slab`; the piece is
  // appended. Returns the granules taken.
  unsigned take_run(uintptr_t base, uint32_t& mask, unsigned granules, uint64_t bytes_left,
                    std::vector<HostChunk>* out);

  std::map<uintptr_t, uint32_t> slabs_;  // base -> mask of free granules (bit i: granule i)
  uint64_t free_granules_ = 0;
};

}  // namespace fracgpu
