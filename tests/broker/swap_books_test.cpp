// The swap books (issue 27, rows 1-3; broker/core/swap_books.h): what a tenant writes about
// its memory on host (DeviceUsage.swapped, SlotSchedule.swapped_pages) and its swap reserve
// (TenantLedger.host_reserved), or claims at a re-registration ("holdings"), limits that
// tenant only. The host budget's sum takes a tenant's on-host bytes only up to the broker's
// record of what it let that tenant move (DeviceQuota.host_allowance) and never wraps; the
// books check cuts a ledger that says more and flags it (kind "swap"); a re-charge books on
// host no more than the allowance leaves; a reserve word counts for decisions up to the
// reserve the broker gives now, and is cut (flagged) only past the tenant's cap, so that a
// process keeping its reserve for a move or trimming is never flagged.
#include "core/swap_books.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "core/books_check.h"
#include "core/guarantee_enforcer.h"
#include "core/recharge_policy.h"
#include "fracgpu/ledger_protocol.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::MemoryTenant;
using Clock = std::chrono::steady_clock;

constexpr int64_t kSecond = 1'000'000'000;

// A tenant as the broker publishes it: no demand open.
MemoryTenant tenant(const std::string& name, uint64_t limit, uint64_t request, bool swap) {
  MemoryTenant t{name, 0, limit, request};
  t.q().resident_target = kNoResidentTarget;
  t.q().swap_policy = swap ? kSwapAllow : kSwapNever;
  t.q().priority = static_cast<uint32_t>(PriorityClass::kLow);
  return t;
}

// The quota fields the books check compares with `spec`, as TenantSegments::publish writes them.
void as_published(MemoryTenant& t, const TenantSpec& spec) {
  DeviceQuota& q = t.q();
  std::strncpy(t.quota->tenant, spec.name.c_str(), sizeof t.quota->tenant - 1);
  std::strncpy(q.uuid, "GPU-0", sizeof q.uuid - 1);
  q.memory_limit = spec.devices[0].memory_limit;
  q.memory_request = spec.devices[0].memory_request;
  q.context_footprint = 64 * kMiB;
  q.compute_weight = 100;
  q.compute_ceiling_pct = 0;
  q.priority = static_cast<uint32_t>(PriorityClass::kLow);
}

// ---- Row 1: the host budget's sum ----

// A 4 GiB GPU: a low borrower holds 1 GiB above nothing guaranteed; a tenant guaranteed
// 3264 MiB arrives, so 192 MiB of the borrower's must move, within a 256 MiB host budget.
class HostBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<ArbiterMember> alone = {borrower.member()};
    ASSERT_TRUE(arbiter.burst(alone, borrower.member(), 0, kGiB).ok());
    ASSERT_TRUE(borrower.reserve(kGiB));
  }
  std::vector<ArbiterMember> all() {
    return {borrower.member(), forger.member(), guaranteed.member()};
  }

  MemoryArbiter arbiter{{4 * kGiB}};
  MemoryTenant borrower = tenant("borrower", 4 * kGiB, 0, true);
  // 64 MiB cap, holding nothing, never asked to move anything.
  MemoryTenant forger = tenant("forger", 64 * kMiB, 0, true);
  MemoryTenant guaranteed = tenant("guaranteed", 3264 * kMiB, 3264 * kMiB, false);
  GuaranteeEnforcer enforcer{EnforcerConfig{256 * kMiB, false}, nullptr};
};

TEST_F(HostBudget, AHugeSwappedWordOfATenantNeverAskedToMoveLeavesOthersMovesAlone) {
  forger.ledger->devices[0].swapped = 1ull << 50;  // "1 PiB of mine is on host"
  forger.ledger->schedule[forger.slot][0].swapped_pages = UINT32_MAX;
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), kGiB - 192 * kMiB)
      << "the 192 MiB move fits the 256 MiB budget";
  EXPECT_EQ(enforcer.unswappable_reports(), 0u);
  EXPECT_EQ(booked_on_host(forger.q(), forger.ledger->devices[0]), 0u);
  EXPECT_EQ(borrower.q().host_allowance.load(), 4 * kGiB) << "raised before the target";
}

// The wrap: 192 MiB legitimately on host, and the forger's 2^64 - 192 MiB make the old sum
// exactly 2^64 = 0, which left the whole budget for a further 192 MiB (384 MiB > 256).
TEST_F(HostBudget, AWrappingSwappedWordDoesNotOpenTheBudget) {
  enforcer.tick(all(), arbiter, 0);
  ASSERT_EQ(borrower.q().resident_target.load(), kGiB - 192 * kMiB);
  ledger_protocol::moved_to_host(*borrower.ledger, borrower.slot, 0, 192 * kMiB);
  enforcer.tick(all(), arbiter, kSecond / 10);  // met: the demand settles
  ASSERT_TRUE(enforcer.demands().empty());
  forger.ledger->devices[0].swapped = 0 - 192 * kMiB;
  guaranteed.q().memory_request = 3456 * kMiB;  // 192 MiB more are owed
  guaranteed.q().memory_limit = 3456 * kMiB;
  enforcer.tick(all(), arbiter, kSecond / 5);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget)
      << "192 MiB on host + 192 MiB more would pass the 256 MiB budget";
  EXPECT_EQ(enforcer.unswappable_reports(), 1u);
}

// ---- Row 1: the books check ----

class SwapBooksCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    spec.name = "t";
    spec.devices.push_back(DeviceSpec{0, kGiB, 0, 100, 0, PriorityClass::kLow, ""});
    gpus.gpus.push_back(GpuInfo{0, "GPU-0", "simulated", 16 * kGiB, 64 * kMiB});
    books = std::make_unique<BooksCheck>(gpus);
    watched = {{t.slot, 1000, 1}};
    as_published(t, spec);
    t.q().memory_grant = kGiB;
    ASSERT_TRUE(t.reserve(512 * kMiB));
    books->note_grants("t", *t.quota);
  }
  BooksSubject subject() { return BooksSubject{spec, *t.quota, *t.ledger, watched, false, {}}; }
  std::vector<Violation> check() { return books->check(subject(), now); }
  uint64_t swapped() const { return t.ledger->devices[0].swapped.load(); }
  uint32_t pages() const { return t.ledger->schedule[t.slot][0].swapped_pages.load(); }

  MemoryTenant t = tenant("t", kGiB, 0, true);
  TenantSpec spec;
  GpuInventory gpus;
  std::unique_ptr<BooksCheck> books;
  std::vector<WatchedSlot> watched;
  Clock::time_point now = Clock::now();
};

TEST_F(SwapBooksCheck, ACounterAloneRaisedToWrapIsRestoredToTheSlotsAndFlagged) {
  t.ledger->devices[0].swapped = 0 - 256 * kMiB;
  const auto found = check();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, ViolationKind::kSwap);
  EXPECT_STREQ(violation_kind_name(found[0].kind), "swap");
  EXPECT_EQ(swapped(), 0u);
  EXPECT_TRUE(books->burst_refused("t", now, nullptr));
  EXPECT_TRUE(check().empty()) << "repaired once, not again";
}

TEST_F(SwapBooksCheck, SlotAndCounterRaisedTogetherAreCutToTheAllowance) {
  t.ledger->schedule[t.slot][0].swapped_pages = 4096;  // 8 GiB, consistent with the counter
  t.ledger->devices[0].swapped = 4096 * kSwapPage;
  auto found = check();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, ViolationKind::kSwap);
  EXPECT_EQ(found[0].bytes, 8 * kGiB);
  EXPECT_EQ(swapped(), 0u) << "never asked to move: its allowance is 0";
  EXPECT_EQ(pages(), 0u);
  // Asked to move: whatever it moves up to its cap is honest, and it is not flagged.
  t.q().resident_target = 256 * kMiB;
  allow_moves(t.q());
  ledger_protocol::moved_to_host(*t.ledger, t.slot, 0, 512 * kMiB);
  EXPECT_TRUE(check().empty());
  EXPECT_EQ(swapped(), 512 * kMiB);
  // More than the cap (1 GiB) is not: cut to it.
  t.ledger->schedule[t.slot][0].swapped_pages = 1024;
  t.ledger->devices[0].swapped = 1024 * kSwapPage;
  found = check();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(swapped(), kGiB);
  EXPECT_EQ(pages(), kGiB / kSwapPage);
}

TEST_F(SwapBooksCheck, TheAllowanceHoldsAfterADemandThenFollowsWhatIsOnHostDown) {
  t.q().resident_target = 0;  // the enforcer's demand: everything
  allow_moves(t.q());
  ledger_protocol::moved_to_host(*t.ledger, t.slot, 0, 256 * kMiB);
  EXPECT_TRUE(check().empty());
  t.q().resident_target = kNoResidentTarget;  // withdrawn; the allocation in flight lands
  now += std::chrono::seconds(1);
  ledger_protocol::moved_to_host(*t.ledger, t.slot, 0, 256 * kMiB);
  EXPECT_TRUE(check().empty()) << "within the hold";
  EXPECT_EQ(t.q().host_allowance.load(), kGiB);
  now += SwapBooks::kMoveHold;
  EXPECT_TRUE(check().empty());
  EXPECT_EQ(t.q().host_allowance.load(), 512 * kMiB) << "follows what is on host";
  ledger_protocol::left_host(*t.ledger, t.slot, 0, 512 * kMiB);  // a swap-in
  now += std::chrono::milliseconds(100);
  EXPECT_TRUE(check().empty());
  EXPECT_EQ(t.q().host_allowance.load(), 0u) << "down, never up";
  // Raised again without a demand: cut, flagged.
  ledger_protocol::moved_to_host(*t.ledger, t.slot, 0, 256 * kMiB);
  const auto found = check();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(swapped(), 0u);
}

// A broker restarted (a new BooksCheck, the quota's allowance as the last broker left it):
// honest bytes on host within the allowance stay; a forged figure is cut at its first tick.
TEST_F(SwapBooksCheck, ARestartedBrokerKeepsTheAllowanceOfTheQuota) {
  t.q().resident_target = 0;
  allow_moves(t.q());
  ledger_protocol::moved_to_host(*t.ledger, t.slot, 0, 256 * kMiB);
  EXPECT_TRUE(check().empty());
  t.q().resident_target = kNoResidentTarget;
  now += 2 * SwapBooks::kMoveHold;
  EXPECT_TRUE(check().empty());
  ASSERT_EQ(t.q().host_allowance.load(), 256 * kMiB);
  books = std::make_unique<BooksCheck>(gpus);  // the restart
  books->note_grants("t", *t.quota);
  EXPECT_TRUE(check().empty());
  EXPECT_EQ(swapped(), 256 * kMiB);
  t.ledger->schedule[t.slot][0].swapped_pages = UINT32_MAX;
  t.ledger->devices[0].swapped = 0 - 256 * kMiB;
  const auto found = check();
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(swapped(), 256 * kMiB);
}

// ---- Row 2: a re-registration's claim of bytes on host ----

TEST(SwapBooksRecharge, AClaimOfBytesOnHostIsBoundedByTheAllowanceLessTheOthers) {
  RechargeFacts f;
  f.limit = kGiB;
  f.device_memory = 16 * kGiB;
  f.footprint = 64 * kMiB;
  RechargeDecision d = decide_recharge({0, 896 * kMiB}, f);
  EXPECT_EQ(d.swapped, 0u) << "never let move anything: nothing is booked on host";
  f.host_allowance = 512 * kMiB;
  f.others_swapped = 128 * kMiB;
  d = decide_recharge({0, 896 * kMiB}, f);
  EXPECT_EQ(d.swapped, 384 * kMiB);
  d = decide_recharge({0, 256 * kMiB}, f);
  EXPECT_EQ(d.swapped, 256 * kMiB) << "an honest claim stands";
  f.booked_swapped = 448 * kMiB;
  d = decide_recharge({0, 896 * kMiB}, f);
  EXPECT_EQ(d.swapped, 448 * kMiB) << "never below what the slot books";
}

// ---- Row 3: the swap reserve's words ----

// On a 16 GiB GPU a low borrower holds 12 GiB; a tenant guaranteed 8 GiB arrives: 4 GiB must
// move; of a 6 GiB budget, 3 GiB are on host already (another tenant's, moved when asked).
class ReserveWords : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<ArbiterMember> alone = {borrower.member()};
    ASSERT_TRUE(arbiter.burst(alone, borrower.member(), 0, 12 * kGiB).ok());
    ASSERT_TRUE(borrower.reserve(12 * kGiB));
    allow_moves(parked.q());
    parked.q().memory_grant = 3 * kGiB;
    ASSERT_TRUE(parked.reserve(3 * kGiB));
    ledger_protocol::moved_to_host(*parked.ledger, parked.slot, 0, 3 * kGiB);
    parked.q().memory_grant = 0;
  }
  std::vector<ArbiterMember> all() {
    return {borrower.member(), parked.member(), guaranteed.member()};
  }
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = tenant("borrower", 16 * kGiB, 0, true);
  MemoryTenant parked = tenant("parked", 16 * kGiB, 0, true);
  MemoryTenant guaranteed = tenant("guaranteed", 8 * kGiB, 8 * kGiB, false);
  GuaranteeEnforcer enforcer{EnforcerConfig{6 * kGiB, false}, nullptr};
};

TEST_F(ReserveWords, AWordPastTheReserveGivenBooksNoMovePastTheBudget) {
  borrower.q().host_reserve = 1 * kGiB;                      // what the broker gave it
  borrower.ledger->host_reserved[borrower.slot] = 4 * kGiB;  // what it says it holds
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget)
      << "4 GiB to move, 3 GiB left of the budget, 1 GiB of reserve given: refused";
  EXPECT_EQ(enforcer.unswappable_reports(), 1u);
  borrower.q().host_reserve = 1 * kGiB;  // (the tick's plan gave it the 3 GiB left since)
  EXPECT_EQ(booked_host_reserved(*borrower.quota, *borrower.ledger), kGiB);
  // Two huge words do not wrap into a small figure either.
  const auto other = ledger::claim_slot(*borrower.ledger, 1001, 1);
  ASSERT_TRUE(other.has_value());
  borrower.ledger->host_reserved[borrower.slot] = 1ull << 63;
  borrower.ledger->host_reserved[*other] = 1ull << 63;
  EXPECT_EQ(booked_host_reserved(*borrower.quota, *borrower.ledger), kGiB);
  EXPECT_EQ(ledger_protocol::live_host_reserved(*borrower.ledger), UINT64_MAX);
}

TEST_F(ReserveWords, AWordPastTheReserveGivenDoesNotInflateTheReservesRoom) {
  // The node has 2 GiB available above a 0 floor: the reserves may hold what they hold plus 2.
  uint64_t available = 2 * kGiB;
  GuaranteeEnforcer roomy{
      EnforcerConfig{.host_budget = 64 * kGiB, .host_available = [&] { return available; }},
      nullptr};
  MemoryTenant liar = tenant("liar", 16 * kGiB, 0, true);
  liar.q().host_reserve = 0;
  liar.ledger->host_reserved[liar.slot] = 48 * kGiB;  // "48 GiB pinned, count them as room"
  roomy.tick(std::vector<ArbiterMember>{borrower.member(), liar.member()}, arbiter, 0);
  EXPECT_EQ(borrower.q().host_reserve.load(), 2 * kGiB)
      << "the room is the 2 GiB available, not 50";
}

// A process keeps its reserve while a demand is open and while slabs hold host copies, above
// the reserve given: never flagged for that. A word past the tenant's cap is no reserve any
// process could hold: cut to the cap, flagged.
TEST(ReserveWordsCheck, AWordAboveTheReserveGivenIsNotFlaggedOnePastTheCapIsCut) {
  MemoryTenant t = tenant("t", 16 * kGiB, 0, true);
  TenantSpec spec;
  spec.name = "t";
  spec.devices.push_back(DeviceSpec{0, 16 * kGiB, 0, 100, 0, PriorityClass::kLow, ""});
  GpuInventory gpus;
  gpus.gpus.push_back(GpuInfo{0, "GPU-0", "simulated", 16 * kGiB, 64 * kMiB});
  as_published(t, spec);
  BooksCheck books{gpus};
  books.note_grants("t", *t.quota);
  const std::vector<WatchedSlot> watched = {{t.slot, 1000, 1}};
  Clock::time_point now = Clock::now();
  auto check = [&] { return books.check({spec, *t.quota, *t.ledger, watched, false, {}}, now); };
  t.q().host_reserve = 4 * kGiB;
  t.ledger->host_reserved[t.slot] = 4 * kGiB;
  EXPECT_TRUE(check().empty());
  t.q().host_reserve = 832 * kMiB;  // the plan cut it; the process holds on for a while
  for (int i = 0; i < 50; ++i) {
    now += std::chrono::milliseconds(100);
    EXPECT_TRUE(check().empty());
  }
  EXPECT_EQ(t.ledger->host_reserved[t.slot].load(), 4 * kGiB);
  EXPECT_EQ(booked_host_reserved(*t.quota, *t.ledger), 832 * kMiB) << "what decisions count";
  t.ledger->host_reserved[t.slot] = 1ull << 62;  // forged
  const auto found = check();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, ViolationKind::kSwap);
  EXPECT_EQ(t.ledger->host_reserved[t.slot].load(), 16 * kGiB) << "cut to the cap";
  EXPECT_TRUE(books.burst_refused("t", now, nullptr));
}

}  // namespace
}  // namespace fracgpu::broker
