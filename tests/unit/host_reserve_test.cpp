// HostReserve (interpose/core/host_reserve.h), the swap reserve's book: whole free slabs
// are taken first, then runs of free granules; every piece lies inside one slab and the
// pieces of one take cover the bytes asked for in order; give_back frees exactly what a
// piece took; only whole free slabs leave, and never below what is to be kept.
#include "core/host_reserve.h"

#include <gtest/gtest.h>

#include <vector>

namespace fracgpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kSlab = HostReserve::kSlabBytes;
constexpr uint64_t kGranule = HostReserve::kGranule;

// Fake slab addresses, far apart (the book never touches the memory).
void* slab(int i) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uint64_t(i) * 4 * kSlab);
}

uint64_t sum_bytes(const std::vector<HostChunk>& pieces) {
  uint64_t sum = 0;
  for (const HostChunk& p : pieces) sum += p.bytes;
  return sum;
}

TEST(HostReserve, WholeFreeSlabsAreTakenFirst) {
  HostReserve r;
  r.add_slab(slab(0));
  r.add_slab(slab(1));
  std::vector<HostChunk> first;
  ASSERT_EQ(r.take(10 * kMiB, &first), 10 * kMiB);  // from slab 0: slab 1 stays whole
  std::vector<HostChunk> second;
  ASSERT_EQ(r.take(kSlab, &second), kSlab);
  ASSERT_EQ(second.size(), 1u) << "one copy: the whole free slab";
  EXPECT_EQ(second[0].base, slab(1));
  EXPECT_TRUE(second[0].reserve);
  EXPECT_EQ(r.free_bytes(), kSlab - 10 * kMiB);
}

TEST(HostReserve, PiecesCoverTheBytesInOrderInsideOneSlabEach) {
  HostReserve r;
  for (int i = 0; i < 3; ++i) r.add_slab(slab(i));
  std::vector<HostChunk> pieces;
  const uint64_t bytes = 2 * kSlab + 5 * kMiB + 4096;  // not a granule multiple
  ASSERT_EQ(r.take(bytes, &pieces), bytes);
  EXPECT_EQ(sum_bytes(pieces), bytes);
  for (const HostChunk& p : pieces) {
    EXPECT_LE(p.bytes, p.capacity);
    EXPECT_EQ(p.capacity % kGranule, 0u);
    EXPECT_TRUE(r.owns(p.base));
    EXPECT_TRUE(r.owns(static_cast<char*>(p.base) + p.capacity - 1)) << "inside its slab";
  }
  EXPECT_EQ(pieces.back().capacity, 6 * kMiB);  // 5 MiB + 4 KiB rounds to three granules
  EXPECT_EQ(r.free_bytes(), kSlab - 6 * kMiB);
}

TEST(HostReserve, AShortReserveCoversWhatItHas) {
  HostReserve r;
  r.add_slab(slab(0));
  std::vector<HostChunk> pieces;
  EXPECT_EQ(r.take(3 * kSlab, &pieces), kSlab);
  EXPECT_EQ(r.free_bytes(), 0u);
  std::vector<HostChunk> none;
  EXPECT_EQ(r.take(kMiB, &none), 0u);
  EXPECT_TRUE(none.empty());
}

TEST(HostReserve, FragmentsAreUsedRunByRunAndGivenBackExactly) {
  HostReserve r;
  r.add_slab(slab(0));
  std::vector<HostChunk> granules;
  for (int i = 0; i < 32; ++i) ASSERT_EQ(r.take(kGranule, &granules), kGranule);
  ASSERT_EQ(granules.size(), 32u);
  for (size_t i = 0; i < granules.size(); i += 2) r.give_back(granules[i]);  // every other
  EXPECT_EQ(r.free_bytes(), 16 * kGranule);
  std::vector<HostChunk> pieces;
  ASSERT_EQ(r.take(10 * kGranule, &pieces), 10 * kGranule);
  EXPECT_EQ(pieces.size(), 10u) << "each free run is one granule long";
  for (const HostChunk& p : pieces) r.give_back(p);
  for (size_t i = 1; i < granules.size(); i += 2) r.give_back(granules[i]);
  EXPECT_EQ(r.free_bytes(), kSlab);
  r.give_back(granules[1]);  // a second give-back of the same piece changes nothing
  EXPECT_EQ(r.free_bytes(), kSlab);
  std::vector<HostChunk> whole;
  ASSERT_EQ(r.take(kSlab, &whole), kSlab);
  EXPECT_EQ(whole.size(), 1u) << "runs merge again once given back";
}

TEST(HostReserve, OnlyWholeFreeSlabsLeaveAndNeverBelowWhatIsKept) {
  HostReserve r;
  for (int i = 0; i < 4; ++i) r.add_slab(slab(i));
  std::vector<HostChunk> used;
  ASSERT_EQ(r.take(kSlab + 2 * kMiB, &used), kSlab + 2 * kMiB);  // one whole, one partly
  // Free: 62 MiB of the partly used slab and two whole slabs. Keeping 64 MiB free, one
  // whole slab may go; the second would leave 62 MiB.
  const std::vector<void*> removed = r.remove_free_slabs(kSlab);
  EXPECT_EQ(removed.size(), 1u);
  EXPECT_EQ(r.free_bytes(), 2 * kSlab - 2 * kMiB);
  EXPECT_EQ(r.slabs(), 3u);
  for (void* base : removed) EXPECT_FALSE(r.owns(base));
  EXPECT_TRUE(r.remove_free_slabs(0).size() == 1u) << "the partly used slabs stay";
  EXPECT_EQ(r.slabs(), 2u);
  for (const HostChunk& p : used) r.give_back(p);
  EXPECT_EQ(r.remove_all().size(), 2u);
  EXPECT_EQ(r.capacity(), 0u);
  EXPECT_EQ(r.free_bytes(), 0u);
}

TEST(HostReserve, AnAddressOutsideEverySlabIsNotOwned) {
  HostReserve r;
  r.add_slab(slab(1));
  EXPECT_FALSE(r.owns(slab(0)));
  EXPECT_FALSE(r.owns(static_cast<char*>(slab(1)) + kSlab));
  HostChunk stranger;
  stranger.base = slab(0);
  stranger.capacity = kGranule;
  r.give_back(stranger);  // ignored
  EXPECT_EQ(r.free_bytes(), kSlab);
}

}  // namespace
}  // namespace fracgpu
