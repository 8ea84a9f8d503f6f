// The guarantee enforcer on a 16 GiB GPU: a best-effort borrower holds 12 GiB, then a
// tenant guaranteed 8 GiB is admitted. The borrower is asked to move what the guarantee
// needs to host (and only that), lower classes first, within the host budget; a borrower
// that may not swap, or does not, is reported and — with reclaim = kill — stopped. The
// "processes" here are the test playing the shim's side of the ledger protocol.
#include "core/guarantee_enforcer.h"

#include <gtest/gtest.h>

#include <vector>

#include "fracgpu/ledger_protocol.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::MemoryTenant;

constexpr int64_t kSecond = 1'000'000'000;

class Enforcer : public ::testing::Test {
 protected:
  void SetUp() override {
    borrower.q().swap_policy = kSwapAllow;
    borrower.q().priority = static_cast<uint32_t>(PriorityClass::kLow);
    borrower.q().resident_target = kNoResidentTarget;
    const std::vector<ArbiterMember> alone = {borrower.member()};
    ASSERT_TRUE(arbiter.burst(alone, borrower.member(), 0, 12 * kGiB).ok());
    ASSERT_TRUE(borrower.reserve(12 * kGiB));
  }
  std::vector<ArbiterMember> all() {
    std::vector<ArbiterMember> v = {borrower.member()};
    if (admitted) v.push_back(guaranteed.member());
    return v;
  }
  // The borrower's process moves `bytes` to host, as its swap thread would.
  void swap_out(uint64_t bytes) {
    ledger_protocol::moved_to_host(*borrower.ledger, borrower.slot, 0, bytes);
  }

  MemoryTenant borrower{"borrower", 0, 16 * kGiB, 0};
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  bool admitted = false;
  MemoryArbiter arbiter{{16 * kGiB}};
  std::vector<std::string> killed;
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, [this](const std::string& t) {
                               killed.push_back(t);
                               return 1;
                             }};
};

TEST_F(Enforcer, NothingHappensWhileNoGuaranteeIsShort) {
  EXPECT_FALSE(enforcer.tick(all(), arbiter, 0));
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_TRUE(enforcer.demands().empty());
}

TEST_F(Enforcer, AGuaranteeAdmittedLaterGetsItsMemoryBack) {
  admitted = true;
  const uint32_t word = borrower.q().swap_word.load();
  EXPECT_TRUE(enforcer.tick(all(), arbiter, 0));
  // 16 GiB - 8 guaranteed = 8 GiB may be borrowed: 4 of the 12 must move.
  EXPECT_EQ(borrower.q().resident_target.load(), 8 * kGiB);
  EXPECT_NE(borrower.q().swap_word.load(), word) << "the borrower's swap thread is woken";
  ASSERT_EQ(enforcer.demands().size(), 1u);
  swap_out(4 * kGiB);
  enforcer.tick(all(), arbiter, kSecond / 10);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget) << "the demand is met";
  EXPECT_EQ(borrower.grant(), 8 * kGiB) << "its grant follows it down";
  EXPECT_TRUE(enforcer.demands().empty());
  EXPECT_EQ(borrower.ledger->devices[0].swapped.load(), 4 * kGiB);
  // Its memory cannot come back while the guarantee needs it: no burst is left.
  EXPECT_FALSE(arbiter.burst(all(), borrower.member(), 0, 4 * kGiB).ok());
  EXPECT_TRUE(killed.empty());
}

TEST_F(Enforcer, IdleHeadroomIsTakenBeforeAnythingMoves) {
  borrower.release(4 * kGiB);  // holds 8, granted 12
  admitted = true;
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.grant(), 8 * kGiB);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget) << "nothing has to move";
}

TEST_F(Enforcer, LowerClassesMoveFirst) {
  MemoryTenant normal{"normal", 0, 16 * kGiB, 0};
  normal.q().swap_policy = kSwapAllow;
  normal.q().priority = static_cast<uint32_t>(PriorityClass::kNormal);
  normal.q().resident_target = kNoResidentTarget;
  borrower.release(10 * kGiB);  // low holds 2
  borrower.q().memory_grant = 2 * kGiB;
  normal.q().memory_grant = 6 * kGiB;
  ASSERT_TRUE(normal.reserve(6 * kGiB));
  admitted = true;  // 8 may be borrowed; 8 are: nothing to do
  std::vector<ArbiterMember> v = {borrower.member(), normal.member(), guaranteed.member()};
  enforcer.tick(v, arbiter, 0);
  EXPECT_TRUE(enforcer.demands().empty());
  guaranteed.q().memory_request = 8 * kGiB + 3 * kGiB;  // a raised request: 3 GiB short
  guaranteed.q().memory_limit = 11 * kGiB;
  enforcer.tick(v, arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), 0u) << "the low tenant gives all it borrows";
  EXPECT_EQ(normal.q().resident_target.load(), 5 * kGiB) << "the normal one only the rest";
}

// Within a class the least recently active borrower gives first, whatever its size: the
// busy one keeps its memory on the GPU.
TEST_F(Enforcer, TheLeastRecentlyActiveOfAClassMovesFirst) {
  MemoryTenant busy{"busy", 0, 16 * kGiB, 0};
  busy.q().swap_policy = kSwapAllow;
  busy.q().priority = static_cast<uint32_t>(PriorityClass::kLow);
  busy.q().resident_target = kNoResidentTarget;
  borrower.release(8 * kGiB);  // the quiet one holds 4, the busy one 6
  borrower.q().memory_grant = 4 * kGiB;
  busy.q().memory_grant = 6 * kGiB;
  ASSERT_TRUE(busy.reserve(6 * kGiB));
  borrower.ledger->processes[borrower.slot].last_active_ns = 1 * kSecond;
  busy.ledger->processes[busy.slot].last_active_ns = 9 * kSecond;
  admitted = true;  // 8 may be borrowed, 10 are: 2 GiB must move
  std::vector<ArbiterMember> v = {busy.member(), borrower.member(), guaranteed.member()};
  enforcer.tick(v, arbiter, 10 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), 2 * kGiB) << "the quiet one moves";
  EXPECT_EQ(busy.q().resident_target.load(), kNoResidentTarget) << "the busy one stays";
}

TEST_F(Enforcer, ABorrowerThatMayNotSwapIsReportedAndKilledOnlyWhenAsked) {
  borrower.q().swap_policy = kSwapNever;
  admitted = true;
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_GE(enforcer.unswappable_reports(), 1u);
  EXPECT_TRUE(killed.empty());

  GuaranteeEnforcer killer{EnforcerConfig{64 * kGiB, true}, [this](const std::string& t) {
                             killed.push_back(t);
                             return 1;
                           }};
  killer.tick(all(), arbiter, 0);
  ASSERT_EQ(killed.size(), 1u);
  EXPECT_EQ(killed[0], "borrower");
}

TEST_F(Enforcer, ADemandNotMetInTimeIsReported) {
  GuaranteeEnforcer killer{EnforcerConfig{64 * kGiB, true}, [this](const std::string& t) {
                             killed.push_back(t);
                             return 1;
                           }};
  admitted = true;
  killer.tick(all(), arbiter, 0);
  EXPECT_TRUE(killed.empty()) << "asked first";
  swap_out(1 * kGiB);  // moves only part (pinned memory)
  killer.tick(all(), arbiter, kSecond / 2);
  EXPECT_TRUE(killed.empty()) << "within the deadline";
  killer.tick(all(), arbiter, 3 * kSecond);
  ASSERT_EQ(killed.size(), 1u);
}

TEST_F(Enforcer, TheHostBudgetIsRespected) {
  GuaranteeEnforcer tight{EnforcerConfig{2 * kGiB, false}, nullptr};
  admitted = true;
  tight.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget)
      << "4 GiB would not fit in a 2 GiB host budget";
  EXPECT_GE(tight.unswappable_reports(), 1u);
}

TEST_F(Enforcer, IdleAndGuaranteeDemandsShareOneHostBudget) {
  MemoryTenant idle_one{"idle-one", 0, 4 * kGiB, 0};
  idle_one.q().swap_policy = kSwapAllow;
  idle_one.q().resident_target = kNoResidentTarget;
  idle_one.q().memory_grant = 3 * kGiB;
  borrower.release(3 * kGiB);  // the borrower holds 9, idle-one 3: 12 borrowed
  borrower.q().memory_grant = 9 * kGiB;
  ASSERT_TRUE(idle_one.reserve(3 * kGiB));
  idle_one.ledger->processes[idle_one.slot].last_active_ns = 1;
  GuaranteeEnforcer tight{
      EnforcerConfig{.host_budget = 3 * kGiB + kGiB / 2, .idle_after_ns = kSecond}, nullptr};
  std::vector<ArbiterMember> v = {borrower.member(), idle_one.member()};
  tight.tick(v, arbiter, kSecond);   // learns when idle-one was last active
  v.push_back(guaranteed.member());  // 8 may be borrowed, 12 are: 4 must move
  tight.tick(v, arbiter, 10 * kSecond);
  EXPECT_EQ(idle_one.q().resident_target.load(), 0u) << "the idle tenant's 3 GiB go first";
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget)
      << "the 1 GiB still owed would take the host past its 3.5 GiB budget";
  EXPECT_GE(tight.unswappable_reports(), 1u);
}

TEST_F(Enforcer, ADemandNoLongerNeededIsWithdrawn) {
  admitted = true;
  enforcer.tick(all(), arbiter, 0);
  ASSERT_EQ(borrower.q().resident_target.load(), 8 * kGiB);
  admitted = false;  // the guaranteed tenant was deleted
  enforcer.tick(all(), arbiter, kSecond / 10);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_TRUE(enforcer.demands().empty());
}

TEST_F(Enforcer, AnIdleTenantMovesToHostOnceAndAgainOnlyAfterItRan) {
  GuaranteeEnforcer idle{EnforcerConfig{.host_budget = 64 * kGiB, .idle_after_ns = 5 * kSecond},
                         nullptr};
  ProcessSlot& slot = borrower.ledger->processes[borrower.slot];
  slot.last_active_ns = 1 * kSecond;
  idle.tick(all(), arbiter, 5 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget) << "idle for 4 s only";
  idle.tick(all(), arbiter, 6 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), 0u) << "idle for 5 s: everything may go";
  swap_out(12 * kGiB);
  idle.tick(all(), arbiter, 6 * kSecond + kSecond / 10);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_EQ(borrower.grant(), 0u) << "its memory comes back through a burst";
  EXPECT_EQ(idle.unswappable_reports(), 0u);
  idle.tick(all(), arbiter, 60 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget) << "once per idle period";
  // It ran again (its swap thread published the time), then went idle again.
  ledger_protocol::left_host(*borrower.ledger, borrower.slot, 0, 12 * kGiB);
  borrower.q().memory_grant = 12 * kGiB;
  ASSERT_TRUE(borrower.reserve(12 * kGiB));
  slot.last_active_ns = 61 * kSecond;
  idle.tick(all(), arbiter, 62 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  idle.tick(all(), arbiter, 66 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), 0u);
}

TEST_F(Enforcer, AnIdleTenantThatMayNotSwapStaysAndIsNotReported) {
  borrower.q().swap_policy = kSwapNever;
  GuaranteeEnforcer idle{EnforcerConfig{.host_budget = 64 * kGiB, .idle_after_ns = kSecond},
                         nullptr};
  borrower.ledger->processes[borrower.slot].last_active_ns = 1;
  idle.tick(all(), arbiter, 10 * kSecond);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_EQ(idle.unswappable_reports(), 0u);
}

}  // namespace
}  // namespace fracgpu::broker
