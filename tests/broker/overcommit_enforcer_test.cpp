// The guarantee enforcer's answers to the overcommit holes found end to end
// (tests/integration/overcommit_*_test.cpp), on a 16 GiB GPU with the test playing the
// shim's side of the ledger: the report of memory that cannot move gives its bytes per
// tenant GPU; the host budget counts what open demands will still move, not only what is
// on host already; a grant left below what is used (a process that brought its memory back
// while no broker answered) is raised over it, as far as the device confirms it (issue 27:
// a forged ledger raises nothing), and the guarantee it breaks is enforced.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/guarantee_enforcer.h"
#include "fracgpu/ledger_protocol.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::MemoryTenant;

constexpr int64_t kSecond = 1'000'000'000;

MemoryTenant borrower_of(const std::string& name, uint64_t holds, MemoryArbiter& arbiter) {
  MemoryTenant t{name, 0, 16 * kGiB, 0};
  t.q().swap_policy = kSwapAllow;
  t.q().priority = static_cast<uint32_t>(PriorityClass::kLow);
  t.q().resident_target = kNoResidentTarget;
  const std::vector<ArbiterMember> alone = {t.member()};
  EXPECT_TRUE(arbiter.burst(alone, t.member(), 0, holds).ok());
  EXPECT_TRUE(t.reserve(holds));
  return t;
}

TEST(OvercommitEnforcer, AnUnmetDemandReportsThePinnedBytesOfTheTenantGpu) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = borrower_of("borrower", 12 * kGiB, arbiter);
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, nullptr};
  const std::vector<ArbiterMember> all = {borrower.member(), guaranteed.member()};
  enforcer.tick(all, arbiter, 0);
  ASSERT_EQ(borrower.q().resident_target.load(), 8 * kGiB);
  // It moves 1 GiB of the 4 asked and nothing more: 11 GiB stay, pinned.
  ledger_protocol::moved_to_host(*borrower.ledger, borrower.slot, 0, 1 * kGiB);
  enforcer.tick(all, arbiter, kSecond / 2);
  EXPECT_TRUE(enforcer.pinned().empty()) << "not before its deadline";
  enforcer.tick(all, arbiter, 4 * kSecond);
  ASSERT_EQ(enforcer.pinned().count("borrower/0"), 1u);
  EXPECT_EQ(enforcer.pinned().at("borrower/0"), 11 * kGiB);
  EXPECT_EQ(enforcer.unswappable_reports(), 1u);
}

TEST(OvercommitEnforcer, ATenantThatMayNotSwapHasAllItsMemoryPinned) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant fixed = borrower_of("fixed", 12 * kGiB, arbiter);
  fixed.q().swap_policy = kSwapNever;
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, nullptr};
  enforcer.tick(std::vector<ArbiterMember>{fixed.member(), guaranteed.member()}, arbiter, 0);
  ASSERT_EQ(enforcer.pinned().count("fixed/0"), 1u);
  EXPECT_EQ(enforcer.pinned().at("fixed/0"), 12 * kGiB);
  // A tenant that is gone leaves no report behind.
  enforcer.tick(std::vector<ArbiterMember>{guaranteed.member()}, arbiter, kSecond);
  EXPECT_TRUE(enforcer.pinned().empty());
}

// Two guarantees a tick apart with a 5 GiB host budget: the first demand (4 GiB) is still
// copying when the second (2 GiB more) comes. On host there is only 1 GiB yet, but 3 GiB
// more are on their way: the second would take the host to 6 GiB and is refused.
TEST(OvercommitEnforcer, TheHostBudgetCountsWhatOpenDemandsWillStillMove) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant first = borrower_of("first", 12 * kGiB, arbiter);
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{5 * kGiB, false}, nullptr};
  std::vector<ArbiterMember> all = {first.member(), guaranteed.member()};
  enforcer.tick(all, arbiter, 0);
  ASSERT_EQ(first.q().resident_target.load(), 8 * kGiB);
  ledger_protocol::moved_to_host(*first.ledger, first.slot, 0, 1 * kGiB);
  guaranteed.q().memory_request = 10 * kGiB;  // raised: 2 GiB more are owed
  guaranteed.q().memory_limit = 10 * kGiB;
  MemoryTenant second{"second", 0, 16 * kGiB, 0};
  second.q().swap_policy = kSwapAllow;
  second.q().resident_target = kNoResidentTarget;
  second.q().memory_grant = 2 * kGiB;  // borrowed before the raise
  ASSERT_TRUE(second.reserve(2 * kGiB));
  all.push_back(second.member());
  enforcer.tick(all, arbiter, kSecond / 10);
  EXPECT_EQ(second.q().resident_target.load(), kNoResidentTarget)
      << "1 GiB on host + 3 GiB still coming + 2 GiB would pass the 5 GiB budget";
  EXPECT_GE(enforcer.unswappable_reports(), 1u);
  EXPECT_EQ(first.q().resident_target.load(), 8 * kGiB) << "the first demand stands";
}

// A process brought 4 GiB back from host while no broker answered (it charges them past
// its grant, swap_engine.cpp): the next broker's enforcer raises the grant over them and
// asks for what the guarantee needs again.
TEST(OvercommitEnforcer, AGrantBelowWhatIsUsedIsRaisedAndTheGuaranteeEnforcedAgain) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = borrower_of("borrower", 8 * kGiB, arbiter);
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, nullptr};
  const std::vector<ArbiterMember> all = {borrower.member(), guaranteed.member()};
  ledger_protocol::force_charge(*borrower.ledger, borrower.slot, 0, 4 * kGiB);
  ASSERT_EQ(borrower.used(), 12 * kGiB);
  ASSERT_EQ(borrower.grant(), 8 * kGiB + 256 * kMiB);
  EXPECT_TRUE(enforcer.tick(all, arbiter, 0));
  EXPECT_EQ(borrower.grant(), 12 * kGiB) << "the grant covers what is on the device";
  EXPECT_EQ(borrower.q().resident_target.load(), 8 * kGiB) << "4 GiB must move again";
}

// Issue 27: `used` and the slots' `used[]` are the tenant's to write. A forger (2 GiB
// guaranteed, normal class) raises both together to 6 GiB while the device shows its process
// holding nothing: the grant is not raised over what the device confirms, so nothing looks
// over-borrowed and the low-class borrower beside it is asked for nothing. (The old cover
// raised the forger's grant to 6 GiB: 12.25 GiB borrowed of a 10 GiB pool, and the borrower
// was asked to move 2.25 GiB.) What the device does confirm is covered, and no more.
TEST(OvercommitEnforcer, ALedgerAboveWhatTheDeviceShowsRaisesNoGrantAndMovesNoOtherTenant) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant other = borrower_of("other", 8 * kGiB, arbiter);
  MemoryTenant forger{"forger", 0, 8 * kGiB, 2 * kGiB};
  forger.q().priority = static_cast<uint32_t>(PriorityClass::kNormal);
  forger.q().resident_target = kNoResidentTarget;
  MemoryTenant guaranteed{"guaranteed", 0, 4 * kGiB, 4 * kGiB};
  std::map<std::string, uint64_t> device = {{"other", 8 * kGiB}, {"forger", 0}};
  EnforcerConfig config{64 * kGiB, false};
  config.on_device = [&](const std::string& tenant, uint32_t gpu) -> std::optional<uint64_t> {
    EXPECT_EQ(gpu, 0u);
    return device.at(tenant);
  };
  GuaranteeEnforcer enforcer{config, nullptr};
  const std::vector<ArbiterMember> all = {other.member(), forger.member(), guaranteed.member()};
  enforcer.tick(all, arbiter, 0);
  ASSERT_TRUE(enforcer.demands().empty()) << "6 GiB guaranteed, 8.25 of 10 borrowed: no debt";

  ledger_protocol::force_charge(*forger.ledger, forger.slot, 0, 6 * kGiB);
  ASSERT_EQ(forger.used(), 6 * kGiB);
  enforcer.tick(all, arbiter, kSecond / 10);
  EXPECT_EQ(forger.grant(), 2 * kGiB) << "nothing the device confirms";
  EXPECT_EQ(other.q().resident_target.load(), kNoResidentTarget) << "the borrower keeps its memory";
  EXPECT_TRUE(enforcer.demands().empty());

  device["forger"] = 3 * kGiB;  // the device shows 3 GiB: those are covered, not the 6 said
  enforcer.tick(all, arbiter, 2 * kSecond / 10);
  EXPECT_EQ(forger.grant(), 3 * kGiB);
  EXPECT_EQ(other.q().resident_target.load(), kNoResidentTarget) << "9.25 of 10 borrowed";
}

// Without a device figure (no NVML: the port says nullopt) the ledger is taken as it is, as
// AGrantBelowWhatIsUsedIsRaisedAndTheGuaranteeEnforcedAgain shows without a port.
TEST(OvercommitEnforcer, WithoutADeviceFigureTheLedgerIsCovered) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant t = borrower_of("t", 2 * kGiB, arbiter);
  EnforcerConfig config{64 * kGiB, false};
  config.on_device = [](const std::string&, uint32_t) { return std::optional<uint64_t>(); };
  GuaranteeEnforcer enforcer{config, nullptr};
  ledger_protocol::force_charge(*t.ledger, t.slot, 0, 2 * kGiB);
  enforcer.tick(std::vector<ArbiterMember>{t.member()}, arbiter, 0);
  EXPECT_EQ(t.grant(), 4 * kGiB);
}

TEST(OvercommitEnforcer, AGrantIsNeverRaisedAboveTheLimit) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant t = borrower_of("over", 2 * kGiB, arbiter);
  t.q().memory_limit = 3 * kGiB;  // lowered under a larger use (an update)
  ledger_protocol::force_charge(*t.ledger, t.slot, 0, 2 * kGiB);
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, nullptr};
  enforcer.tick(std::vector<ArbiterMember>{t.member()}, arbiter, 0);
  EXPECT_EQ(t.grant(), 3 * kGiB);
}

}  // namespace
}  // namespace fracgpu::broker
