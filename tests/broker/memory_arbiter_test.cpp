// The overcommit policy on the worked example of docs/configuration.md: an 80 GiB GPU,
// tenant A limit 60 / request 40, tenant B limit 60 / request 30, so 10 GiB are
// unguaranteed. Guarantees are always reachable without the broker; bursts share the
// 10 GiB; idle bursts are reclaimed, never below what is in use.
#include "core/memory_arbiter.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::MemoryTenant;

class ArbiterExample : public ::testing::Test {
 protected:
  MemoryTenant a{"a", 0, 60 * kGiB, 40 * kGiB};
  MemoryTenant b{"b", 0, 60 * kGiB, 30 * kGiB};
  MemoryArbiter arbiter{{80 * kGiB}};
  std::vector<ArbiterMember> all() const { return {a.member(), b.member()}; }
  Result<uint64_t> burst(MemoryTenant& t, uint64_t bytes) {
    return arbiter.burst(all(), t.member(), 0, bytes);
  }
};

TEST_F(ArbiterExample, GuaranteesNeedNoBroker) {
  EXPECT_TRUE(a.reserve(40 * kGiB));
  EXPECT_FALSE(a.reserve(1));  // above the grant: must ask
  EXPECT_TRUE(b.reserve(30 * kGiB));
}

TEST_F(ArbiterExample, BurstGrantsNeedPlusHeadroom) {
  ASSERT_TRUE(a.reserve(40 * kGiB));
  auto g = burst(a, 5 * kGiB);
  ASSERT_TRUE(g.ok()) << g.error();
  EXPECT_EQ(*g, 45 * kGiB + kBurstHeadroom);
  EXPECT_TRUE(a.reserve(5 * kGiB));
}

TEST_F(ArbiterExample, BurstsShareOnlyTheUnguaranteedPool) {
  ASSERT_TRUE(a.reserve(40 * kGiB));
  ASSERT_TRUE(burst(a, 8 * kGiB).ok());
  ASSERT_TRUE(a.reserve(8 * kGiB));  // A uses 48 GiB: 8 of the 10 GiB pool
  ASSERT_TRUE(b.reserve(30 * kGiB));
  auto refused = burst(b, 3 * kGiB);  // B would need 3 GiB of the 2 left
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("other tenants"), std::string::npos) << refused.error();
  auto fits = burst(b, 2 * kGiB);  // exactly what is left; A's idle headroom was taken back
  ASSERT_TRUE(fits.ok()) << fits.error();
  EXPECT_EQ(*fits, 32 * kGiB);
  EXPECT_EQ(a.grant(), 48 * kGiB);
  EXPECT_LE(a.grant() - 40 * kGiB + b.grant() - 30 * kGiB, 10 * kGiB);
}

TEST_F(ArbiterExample, LimitIsHard) {
  ASSERT_TRUE(a.reserve(40 * kGiB));
  auto g = burst(a, 21 * kGiB);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.error().find("over its memory limit of 60 GiB"), std::string::npos) << g.error();
}

TEST_F(ArbiterExample, GuaranteeReachableWhileOtherBursts) {
  ASSERT_TRUE(a.reserve(40 * kGiB));
  ASSERT_TRUE(burst(a, 10 * kGiB).ok());
  ASSERT_TRUE(a.reserve(10 * kGiB));  // A holds the whole pool
  EXPECT_TRUE(b.reserve(30 * kGiB));  // B's guarantee is untouched
  EXPECT_FALSE(burst(b, 1).ok());
}

TEST_F(ArbiterExample, ReclaimLowersIdleBurstButNeverBelowUse) {
  ASSERT_TRUE(a.reserve(40 * kGiB));
  ASSERT_TRUE(burst(a, 8 * kGiB).ok());
  ASSERT_TRUE(a.reserve(8 * kGiB));
  a.release(7 * kGiB);  // now 41 GiB in use
  arbiter.reclaim(all());
  EXPECT_EQ(a.grant(), 41 * kGiB + kBurstHeadroom);
  a.release(1 * kGiB);
  arbiter.reclaim(all());
  EXPECT_EQ(a.grant(), 40 * kGiB + kBurstHeadroom);  // in use + headroom
  a.release(1 * kGiB);
  arbiter.reclaim(all());
  EXPECT_EQ(a.grant(), 40 * kGiB);  // back to the request, never below it
  EXPECT_EQ(b.grant(), 30 * kGiB);
}

TEST(LowerGrant, RaisesBackOverMemoryInUse) {
  MemoryTenant t{"t", 0, 10 * kGiB, 1 * kGiB};
  t.q().memory_grant = 8 * kGiB;
  ASSERT_TRUE(t.reserve(6 * kGiB));
  ledger::lower_grant(t.q(), t.ledger->devices[0], 2 * kGiB);
  EXPECT_EQ(t.grant(), 6 * kGiB);
}

// Processes reserving while the broker lowers and raises the grant: every reservation
// that succeeds fits the grant at its post-CAS re-check, so once everyone is quiet the
// counter never exceeds the grant and matches the slots exactly.
TEST(LowerGrant, RacingReservationsNeverOutliveALowerGrant) {
  MemoryTenant t{"t", 0, 64 * kMiB, 0};
  constexpr int kWorkers = 4;
  std::vector<uint32_t> slots;
  for (int i = 0; i < kWorkers; ++i) slots.push_back(*ledger::claim_slot(*t.ledger, 2000 + i, 1));
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(w);
      std::vector<uint64_t> held;
      while (!stop.load()) {
        const uint64_t n = (rng() % 4 + 1) * kMiB;
        if (ledger::reserve(*t.ledger, *t.quota, slots[w], 0, n)) held.push_back(n);
        if (held.size() > 4 || (!held.empty() && rng() % 2)) {
          ledger::release(*t.ledger, slots[w], 0, held.back());
          held.pop_back();
        }
      }
    });
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t target = (rng() % 65) * kMiB;
    if (target < t.grant()) {
      ledger::lower_grant(t.q(), t.ledger->devices[0], target);
    } else {
      t.q().memory_grant = target;
    }
  }
  ledger::lower_grant(t.q(), t.ledger->devices[0], 8 * kMiB);
  stop = true;
  for (auto& th : workers) th.join();
  EXPECT_LE(t.used(), t.grant());  // workers keep what they hold: it must fit the grant
  EXPECT_EQ(t.used(), ledger::live_slot_sum(*t.ledger, 0));
  EXPECT_LE(t.ledger->devices[0].peak.load(), 64 * kMiB);
}

}  // namespace
}  // namespace fracgpu::broker
