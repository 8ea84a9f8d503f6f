// The broker's side of the swap reserve (include/fracgpu/tenant_segment.h, "The swap
// reserve"): SwapReservePlanner's targets (what a tenant that may swap borrows, in the
// enforcer's reclaim order, within what the host budget's moves leave; stored only when they
// change), the guarantee enforcer's budget with reserves (a move fills its own tenant's
// reserve, displaces another's), the slots' host_reserved zeroed when a slot is given or
// reaped, a rebuilt ledger and one of the older layout, and what `fracgpu status --json`
// shows. The tests play the shim's side of the ledger.
#include "core/swap_reserve.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/gpu_inventory.h"
#include "core/guarantee_enforcer.h"
#include "core/ledger_ops.h"
#include "core/segment_recovery.h"
#include "core/status_report.h"
#include "core/swap_books.h"
#include "core/tenant_registry.h"
#include "core/tenant_segments.h"
#include "fracgpu/ledger_protocol.h"
#include "temp_dir.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::kMiB;
using testing::MemoryTenant;

constexpr int64_t kSecond = 1'000'000'000;

// A tenant on GPU `gpu` holding `used` bytes (granted them) above a request of `request`.
MemoryTenant holder(const std::string& name, uint32_t gpu, uint64_t used, uint64_t request,
                    uint32_t swap, PriorityClass cls) {
  MemoryTenant t{name, gpu, 16 * kGiB, request};
  t.q().swap_policy = swap;
  t.q().priority = static_cast<uint32_t>(cls);
  t.q().resident_target = kNoResidentTarget;
  t.q().memory_grant = std::max(used, request);
  EXPECT_TRUE(t.reserve(used));
  return t;
}

uint64_t reserve_of(const MemoryTenant& t) {
  return t.quota->devices[0].host_reserve.load();
}

std::vector<ArbiterMember> members(std::initializer_list<const MemoryTenant*> tenants) {
  std::vector<ArbiterMember> v;
  for (const MemoryTenant* t : tenants) v.push_back(t->member());
  return v;
}

// ---- The plan ----

TEST(SwapReservePlanner, ATenantThatMaySwapMayReserveWhatItBorrows) {
  MemoryTenant allow = holder("allow", 0, 6 * kGiB, 2 * kGiB, kSwapAllow, PriorityClass::kLow);
  MemoryTenant never = holder("never", 0, 6 * kGiB, 2 * kGiB, kSwapNever, PriorityClass::kLow);
  MemoryTenant within = holder("within", 0, 1 * kGiB, 2 * kGiB, kSwapAllow, PriorityClass::kLow);
  never.q().host_reserve = 3 * kGiB;  // left by an earlier plan, before its update to never
  SwapReservePlanner planner{64 * kGiB};
  EXPECT_FALSE(planner.active());
  planner.plan(members({&allow, &never, &within}), 64 * kGiB);
  EXPECT_EQ(reserve_of(allow), 4 * kGiB) << "resident bytes above its request";
  EXPECT_EQ(reserve_of(never), 0u) << "its memory may not move";
  EXPECT_EQ(reserve_of(within), 0u) << "it borrows nothing";
  EXPECT_TRUE(planner.active());
}

// A budget too small for every want is served in the enforcer's reclaim order: the low class
// before the normal one; within it the least recently active first, then the largest.
TEST(SwapReservePlanner, ASmallBudgetGoesToTheFirstTheEnforcerWouldAsk) {
  MemoryTenant normal = holder("normal", 0, 3 * kGiB, 0, kSwapAllow, PriorityClass::kNormal);
  MemoryTenant busy = holder("busy", 0, 2 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  MemoryTenant small = holder("small", 0, 1 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  MemoryTenant quiet = holder("quiet", 0, 2 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  busy.ledger->processes[busy.slot].last_active_ns = 9 * kSecond;
  small.ledger->processes[small.slot].last_active_ns = 1 * kSecond;
  quiet.ledger->processes[quiet.slot].last_active_ns = 1 * kSecond;
  SwapReservePlanner planner{64 * kGiB};
  planner.plan(members({&normal, &busy, &small, &quiet}), 4 * kGiB);
  EXPECT_EQ(reserve_of(quiet), 2 * kGiB) << "low, quiet and the larger of the quiet ones";
  EXPECT_EQ(reserve_of(small), 1 * kGiB);
  EXPECT_EQ(reserve_of(busy), 1 * kGiB) << "what is left: 4 - 2 - 1";
  EXPECT_EQ(reserve_of(normal), 0u) << "the normal class comes after every low tenant";
  // Room for every want again: everyone gets all it borrows.
  planner.plan(members({&normal, &busy, &small, &quiet}), 8 * kGiB);
  EXPECT_EQ(reserve_of(normal), 3 * kGiB);
  EXPECT_EQ(reserve_of(busy), 2 * kGiB);
}

TEST(SwapReservePlanner, EqualBorrowersKeepTheirOrder) {
  MemoryTenant first = holder("first", 0, 2 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  MemoryTenant second = holder("second", 0, 2 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  SwapReservePlanner planner{64 * kGiB};
  for (int i = 0; i < 3; ++i) {
    planner.plan(members({&first, &second}), 3 * kGiB);
    EXPECT_EQ(reserve_of(first), 2 * kGiB);
    EXPECT_EQ(reserve_of(second), 1 * kGiB);
  }
}

TEST(SwapReservePlanner, WithoutAHostBudgetNobodyReserves) {
  MemoryTenant allow = holder("allow", 0, 6 * kGiB, 2 * kGiB, kSwapAllow, PriorityClass::kLow);
  allow.q().host_reserve = 4 * kGiB;  // a quota left by a broker that had a budget
  SwapReservePlanner planner{0};
  planner.plan(members({&allow}), 64 * kGiB);
  EXPECT_EQ(reserve_of(allow), 0u);
  EXPECT_FALSE(planner.active()) << "no tick needed for reserves that cannot be";
}

TEST(SwapReservePlanner, ReservesFollowBorrowingBackToZero) {
  MemoryTenant allow = holder("allow", 0, 6 * kGiB, 2 * kGiB, kSwapAllow, PriorityClass::kLow);
  SwapReservePlanner planner{64 * kGiB};
  planner.plan(members({&allow}), 0);
  EXPECT_EQ(reserve_of(allow), 0u) << "nothing left in the budget";
  EXPECT_TRUE(planner.active()) << "it borrows: the reserve follows once there is room";
  planner.plan(members({&allow}), 64 * kGiB);
  EXPECT_EQ(reserve_of(allow), 4 * kGiB);
  allow.release(5 * kGiB);  // holds 1, under its request
  planner.plan(members({&allow}), 64 * kGiB);
  EXPECT_EQ(reserve_of(allow), 0u);
  EXPECT_FALSE(planner.active());
}

TEST(SwapReservePlanner, BytesADemandMovesAreNotReservedAgain) {
  MemoryTenant allow = holder("allow", 0, 6 * kGiB, 2 * kGiB, kSwapAllow, PriorityClass::kLow);
  SwapReservePlanner planner{64 * kGiB};
  planner.plan(members({&allow}), 64 * kGiB,
               [](const ArbiterMember&, const DeviceQuota&, uint64_t used) {
                 return used - 5 * kGiB;  // a demand for 5 GiB resident: 1 GiB on its way
               });
  EXPECT_EQ(reserve_of(allow), 3 * kGiB) << "5 GiB stay resident, 3 above the request";
}

// A quota on a page of its own, which a test can make read-only: a store then faults.
class PagedTenant {
 public:
  explicit PagedTenant(uint64_t used) {
    page_ = std::aligned_alloc(kPage, kPage);
    std::memset(page_, 0, kPage);
    quota_ = static_cast<TenantQuota*>(page_);
    ledger::initialize(*ledger_);
    quota_->device_count = 1;
    DeviceQuota& d = quota_->devices[0];
    d.present = 1;
    d.memory_limit = 16 * kGiB;
    d.memory_grant = used;
    d.swap_policy = kSwapAllow;
    ledger_->devices[0].used = used;
  }
  ~PagedTenant() {
    writable();
    std::free(page_);
  }
  void read_only() { ASSERT_EQ(::mprotect(page_, kPage, PROT_READ), 0); }
  void writable() { ::mprotect(page_, kPage, PROT_READ | PROT_WRITE); }
  ArbiterMember member(const std::string& name) const { return {name, quota_, ledger_.get()}; }
  DeviceQuota& q() { return quota_->devices[0]; }

 private:
  static constexpr std::size_t kPage = 4096;
  static_assert(sizeof(TenantQuota) <= kPage);
  void* page_ = nullptr;
  TenantQuota* quota_ = nullptr;
  std::unique_ptr<TenantLedger> ledger_ = std::make_unique<TenantLedger>();
};

TEST(SwapReservePlannerDeathTest, AnUnchangedPlanStoresNothing) {
  PagedTenant a{3 * kGiB}, b{2 * kGiB};
  const std::vector<ArbiterMember> all = {a.member("a"), b.member("b")};
  SwapReservePlanner planner{64 * kGiB};
  planner.plan(all, 4 * kGiB);  // less than the 5 wanted: the ranked path
  ASSERT_EQ(a.q().host_reserve.load(), 3 * kGiB);
  ASSERT_EQ(b.q().host_reserve.load(), 1 * kGiB);
  a.read_only();
  b.read_only();
  {
    // The pages do refuse a store: the kernel's own write into them fails with EFAULT (no
    // signal: a deliberate crash would be a sanitizer report of its own).
    const int zero = ::open("/dev/zero", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(zero, 0);
    errno = 0;
    EXPECT_EQ(::read(zero, static_cast<void*>(&a.q().host_reserve), 1), -1);
    EXPECT_EQ(errno, EFAULT);
    ::close(zero);
  }
  EXPECT_EXIT(
      {
        planner.plan(all, 4 * kGiB);
        std::_Exit(a.q().host_reserve.load() == 3 * kGiB ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "")
      << "the same plan again: not one store";
}

// ---- The enforcer's budget with reserves ----

// On a 16 GiB GPU a low borrower holds 12 GiB; a tenant guaranteed 8 GiB arrives: 4 GiB must
// move. Another tenant has 3 GiB on host, so of a 6 GiB budget 3 are left.
class OwnReserve : public ::testing::Test {
 protected:
  void SetUp() override {
    parked.q().memory_grant = 3 * kGiB;
    ASSERT_TRUE(parked.reserve(3 * kGiB));
    allow_moves(parked.q());  // the broker had asked it to move (swap_books.h)
    ledger_protocol::moved_to_host(*parked.ledger, parked.slot, 0, 3 * kGiB);
    parked.q().memory_grant = 0;
  }
  std::vector<ArbiterMember> all() { return members({&borrower, &parked, &guaranteed}); }

  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = holder("borrower", 0, 12 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  MemoryTenant parked{"parked", 0, 16 * kGiB, 0};
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{6 * kGiB, false}, nullptr};
};

// The reserve its processes pinned earlier takes the 4 GiB without pinning more: the budget's
// 3 GiB left could not.
TEST_F(OwnReserve, ATenantsOwnReserveTakesAMoveTheBudgetLeftCouldNot) {
  borrower.q().host_reserve = 4 * kGiB;  // given by an earlier plan, and pinned
  borrower.ledger->host_reserved[borrower.slot] = 4 * kGiB;
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), 8 * kGiB);
  EXPECT_EQ(enforcer.unswappable_reports(), 0u);
  EXPECT_EQ(reserve_of(borrower), 0u) << "nothing left of the budget for a new reserve";
}

TEST_F(OwnReserve, WithoutItTheSameMoveIsRefused) {
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_EQ(enforcer.unswappable_reports(), 1u);
}

TEST_F(OwnReserve, AReserveOfADeadProcessIsNoReserve) {
  borrower.q().host_reserve = 4 * kGiB;
  const auto other = ledger::claim_slot(*borrower.ledger, 1001, 1);
  ASSERT_TRUE(other.has_value());
  borrower.ledger->host_reserved[*other] = 4 * kGiB;
  ledger::mark_dead(*borrower.ledger, *other);  // not reaped yet
  enforcer.tick(all(), arbiter, 0);
  EXPECT_EQ(borrower.q().resident_target.load(), kNoResidentTarget);
  EXPECT_EQ(enforcer.unswappable_reports(), 1u);
}

// A reserve is never a reason to refuse a move: tenant A's reserve, for its memory on GPU 0,
// fills the whole budget when a guarantee on GPU 1 needs 4 GiB of B's. Counting A's reserve
// against the move would leave B's memory where the guarantee needs it (and, with reclaim =
// kill, stop B) for room that A holds only to move faster; the move is made, and the plan
// gives A what the move leaves.
TEST(ReserveBudget, AMoveDisplacesAnotherTenantsReserveAndThePlanShrinksIt) {
  MemoryArbiter arbiter{{16 * kGiB, 16 * kGiB}};
  MemoryTenant a = holder("a", 0, 8 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  MemoryTenant b = holder("b", 1, 12 * kGiB, 0, kSwapAllow, PriorityClass::kNormal);
  MemoryTenant g{"g", 1, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{8 * kGiB, false}, nullptr};
  enforcer.tick(members({&a, &b}), arbiter, 0);
  EXPECT_EQ(reserve_of(a), 8 * kGiB) << "the low class first";
  EXPECT_EQ(reserve_of(b), 0u);
  a.ledger->host_reserved[a.slot] = 8 * kGiB;  // its processes pinned it

  enforcer.tick(members({&a, &b, &g}), arbiter, kSecond / 10);
  EXPECT_EQ(b.q().resident_target.load(), 8 * kGiB) << "the move is made";
  EXPECT_EQ(enforcer.unswappable_reports(), 0u);
  EXPECT_EQ(reserve_of(a), 4 * kGiB) << "8 GiB budget - 4 GiB on their way to host";
  EXPECT_EQ(reserve_of(b), 0u);

  ledger_protocol::moved_to_host(*b.ledger, b.slot, 0, 4 * kGiB);
  a.ledger->host_reserved[a.slot] = 4 * kGiB;  // trimmed at its next look
  enforcer.tick(members({&a, &b, &g}), arbiter, kSecond / 5);
  EXPECT_TRUE(enforcer.demands().empty()) << "met";
  EXPECT_EQ(b.grant(), 8 * kGiB);
  EXPECT_EQ(reserve_of(a), 4 * kGiB) << "8 GiB budget - 4 GiB on host";
}

TEST(ReserveBudget, ADemandedTenantReservesOnlyForWhatStaysResident) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = holder("borrower", 0, 12 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  MemoryTenant guaranteed{"guaranteed", 0, 8 * kGiB, 8 * kGiB};
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, nullptr};
  enforcer.tick(members({&borrower}), arbiter, 0);
  EXPECT_EQ(reserve_of(borrower), 12 * kGiB);
  enforcer.tick(members({&borrower, &guaranteed}), arbiter, kSecond / 10);
  ASSERT_EQ(borrower.q().resident_target.load(), 8 * kGiB);
  EXPECT_EQ(reserve_of(borrower), 8 * kGiB) << "the 4 GiB moving have their place as the demand's";
}

TEST(ReserveBudget, TheEnforcerTicksWhileATenantThatMaySwapBorrows) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = holder("borrower", 0, 12 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  GuaranteeEnforcer enforcer{EnforcerConfig{64 * kGiB, false}, nullptr};
  EXPECT_FALSE(enforcer.busy());
  enforcer.tick(members({&borrower}), arbiter, 0);
  EXPECT_TRUE(enforcer.busy()) << "its reserve follows what it borrows";
  borrower.release(12 * kGiB);
  enforcer.tick(members({&borrower}), arbiter, kSecond / 10);
  EXPECT_EQ(reserve_of(borrower), 0u);
  EXPECT_FALSE(enforcer.busy());

  GuaranteeEnforcer no_budget{EnforcerConfig{0, false}, nullptr};
  MemoryTenant other = holder("other", 0, 12 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  no_budget.tick(members({&other}), arbiter, 0);
  EXPECT_FALSE(no_budget.busy()) << "no host budget, no reserve to follow";
  EXPECT_EQ(reserve_of(other), 0u);
}

// The reserves leave the node's available memory above the floor: with 64 GiB of budget but
// 6 GiB available and a floor of 4 GiB, a borrower of 12 GiB may pin 2 GiB; once it holds
// them (they are no longer available) the room stays 2 GiB; when the node has less than the
// floor available, the reserve shrinks by the shortfall; a node that does not say leaves
// the budget alone.
TEST(ReserveFloor, ReservesLeaveTheNodesAvailableMemoryAboveTheFloor) {
  MemoryArbiter arbiter{{16 * kGiB}};
  MemoryTenant borrower = holder("borrower", 0, 12 * kGiB, 0, kSwapAllow, PriorityClass::kLow);
  std::optional<uint64_t> available = 6 * kGiB;
  EnforcerConfig config{64 * kGiB, false};
  config.reserve_floor = 4 * kGiB;
  config.host_available = [&] { return available; };
  GuaranteeEnforcer enforcer{config, nullptr};
  enforcer.tick(members({&borrower}), arbiter, 0);
  EXPECT_EQ(reserve_of(borrower), 2 * kGiB);

  borrower.ledger->host_reserved[borrower.slot] = 2 * kGiB;  // pinned: 4 GiB available now
  available = 4 * kGiB;
  enforcer.tick(members({&borrower}), arbiter, kSecond / 10);
  EXPECT_EQ(reserve_of(borrower), 2 * kGiB) << "what it holds is room of its own";

  available = 3 * kGiB;  // the node's processes grew: 1 GiB below the floor
  enforcer.tick(members({&borrower}), arbiter, kSecond / 5);
  EXPECT_EQ(reserve_of(borrower), 1 * kGiB);

  available = std::nullopt;  // unknown: the budget alone
  enforcer.tick(members({&borrower}), arbiter, kSecond / 2);
  EXPECT_EQ(reserve_of(borrower), 12 * kGiB);
}

// ---- Slots ----

TEST(ReserveSlots, ARegisteredProcessStartsWithNoReserve) {
  auto l = std::make_unique<TenantLedger>();
  ledger::initialize(*l);
  l->host_reserved[0] = 5 * kGiB;  // stale: the slot was freed without it (an older broker)
  const auto slot = ledger::claim_slot(*l, 1000, 1);
  ASSERT_EQ(slot, std::optional<uint32_t>(0));
  EXPECT_EQ(l->host_reserved[0].load(), 0u);
  // The same process again keeps what it holds.
  l->host_reserved[0] = 2 * kGiB;
  EXPECT_EQ(ledger::claim_slot(*l, 1000, 1), std::optional<uint32_t>(0));
  EXPECT_EQ(l->host_reserved[0].load(), 2 * kGiB);
}

TEST(ReserveSlots, AReapedProcesssReserveIsZeroedAndNoLongerCounted) {
  auto l = std::make_unique<TenantLedger>();
  ledger::initialize(*l);
  const uint32_t quiet = *ledger::claim_slot(*l, 1000, 1);
  const uint32_t busy = *ledger::claim_slot(*l, 1001, 1);
  const uint32_t kept = *ledger::claim_slot(*l, 1002, 1);
  l->host_reserved[quiet] = 3 * kGiB;
  l->host_reserved[busy] = 2 * kGiB;
  l->host_reserved[kept] = 1 * kGiB;
  EXPECT_EQ(ledger_protocol::live_host_reserved(*l), 6 * kGiB);
  ledger::mark_dead(*l, quiet);  // died between operations
  ledger::mark_dead(*l, busy);
  l->processes[busy].op_seq = 1;  // died inside one: the counters are recomputed
  EXPECT_EQ(ledger_protocol::live_host_reserved(*l), 1 * kGiB) << "a dead slot is not counted";
  ASSERT_TRUE(ledger::reclaim_dead_slots(*l, 100));
  EXPECT_EQ(l->host_reserved[quiet].load(), 0u);
  EXPECT_EQ(l->host_reserved[busy].load(), 0u);
  EXPECT_EQ(l->host_reserved[kept].load(), 1 * kGiB);
  EXPECT_EQ(ledger_protocol::live_host_reserved(*l), 1 * kGiB);
}

TEST(ReserveSlots, APlaceholderFreedHoldsNoReserve) {
  auto l = std::make_unique<TenantLedger>();
  ledger::initialize(*l);
  const auto slot = ledger::claim_placeholder(*l);
  ASSERT_TRUE(slot.has_value());
  l->host_reserved[*slot] = kGiB;  // what a process that wrongly took it could write
  ledger::free_claimed_slot(*l, *slot);
  EXPECT_EQ(l->host_reserved[*slot].load(), 0u);
}

// A ledger of the older layout (minor 5) is not written past its size, and carries no reserve.
TEST(ReserveSlots, ALedgerWithoutTheFieldIsLeftAlone) {
  auto l = std::make_unique<TenantLedger>();
  ledger::initialize(*l);
  l->size = static_cast<uint32_t>(kLedgerMinSize);
  l->host_reserved[0] = 7;  // beyond its size: not the ledger's
  const auto slot = ledger::claim_slot(*l, 1000, 1);
  ASSERT_EQ(slot, std::optional<uint32_t>(0));
  EXPECT_EQ(l->host_reserved[0].load(), 7u);
  EXPECT_EQ(ledger_protocol::live_host_reserved(*l), 0u);
  ledger::mark_dead(*l, 0);
  ASSERT_TRUE(ledger::reclaim_dead_slots(*l, 100));
  EXPECT_EQ(l->host_reserved[0].load(), 7u);
}

TEST(ReserveSlots, ARebuiltLedgerKeepsOnlyItsLiveProcessesReserves) {
  auto l = std::make_unique<TenantLedger>();
  ledger::initialize(*l);
  const uint32_t live = *ledger::claim_slot(*l, 1000, 1);
  const uint32_t garbage = *ledger::claim_slot(*l, 1001, 1);
  const uint32_t absurd = *ledger::claim_slot(*l, 1002, 1);
  const uint32_t free_slot = 10;
  l->host_reserved[live] = 2 * kGiB;
  l->processes[garbage].state = 7;  // no state a slot can have
  l->host_reserved[garbage] = 5 * kGiB;
  l->host_reserved[absurd] = uint64_t{1} << 60;
  l->host_reserved[free_slot] = 9 * kGiB;
  std::memset(static_cast<void*>(l.get()), 0, 64);  // the header zeroed
  rebuild_ledger(*l);
  EXPECT_EQ(l->size, sizeof(TenantLedger));
  EXPECT_EQ(l->host_reserved[live].load(), 2 * kGiB) << "its process is alive and holds it";
  EXPECT_EQ(l->host_reserved[garbage].load(), 0u);
  EXPECT_EQ(l->host_reserved[absurd].load(), 0u) << "no host pins an exbibyte";
  EXPECT_EQ(l->host_reserved[free_slot].load(), 0u);
  EXPECT_EQ(ledger_protocol::live_host_reserved(*l), 2 * kGiB);
}

// A broker of the older layout left the ledger: the new broker adopts it (its processes keep
// counting in it), extends it and says so in the header.
class OlderLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir.path() / "t");
    std::filesystem::create_directories(dir.path() / "ledgers");
    auto seg = TenantSegments::open(dir.path() / "t", ledger_path());
    ASSERT_TRUE(seg.ok()) << seg.error();
    TenantLedger& l = (*seg)->ledger();
    slot = *ledger::claim_slot(l, ::getpid(), 1);
    ledger::charge(l, slot, 0, 3 * kGiB);
    l.minor = 5;
    l.size = static_cast<uint32_t>(kLedgerMinSize);
  }
  std::filesystem::path ledger_path() const { return dir.path() / "ledgers" / "t"; }

  testing::TempDir dir;
  uint32_t slot = 0;
};

TEST_F(OlderLayout, ATruncatedFileIsExtendedWithZeros) {
  ASSERT_EQ(::truncate(ledger_path().c_str(), static_cast<off_t>(kLedgerMinSize)), 0);
  auto seg = TenantSegments::open(dir.path() / "t", ledger_path());
  ASSERT_TRUE(seg.ok()) << seg.error();
  EXPECT_TRUE((*seg)->ledger_reused());
  EXPECT_FALSE((*seg)->ledger_rebuilt());
  const TenantLedger& l = (*seg)->ledger();
  EXPECT_EQ(l.size, sizeof(TenantLedger));
  EXPECT_EQ(l.minor, kSegmentMinor);
  EXPECT_TRUE(ledger_has_host_reserved(l.size));
  EXPECT_EQ(std::filesystem::file_size(ledger_path()), sizeof(TenantLedger));
  EXPECT_EQ(l.processes[slot].pid.load(), ::getpid()) << "its process is still counted";
  EXPECT_EQ(l.devices[0].used.load(), 3 * kGiB);
  EXPECT_EQ(ledger_protocol::live_host_reserved(l), 0u);
}

TEST_F(OlderLayout, WhateverTheFileHeldBeyondTheOldSizeIsZeroed) {
  const int fd = ::open(ledger_path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const std::vector<unsigned char> junk(sizeof(TenantLedger::host_reserved), 0xff);
  ASSERT_EQ(::pwrite(fd, junk.data(), junk.size(), static_cast<off_t>(kLedgerMinSize)),
            static_cast<ssize_t>(junk.size()));
  ::close(fd);
  auto seg = TenantSegments::open(dir.path() / "t", ledger_path());
  ASSERT_TRUE(seg.ok()) << seg.error();
  const TenantLedger& l = (*seg)->ledger();
  EXPECT_EQ(l.size, sizeof(TenantLedger));
  for (const auto& held : l.host_reserved) ASSERT_EQ(held.load(), 0u);
}

// ---- Status ----

TEST(ReserveStatus, StatusShowsTheReserveAndWhatItsProcessesHold) {
  testing::TempDir dir;
  GpuInventory gpus;
  gpus.gpus.push_back(
      {0, "GPU-01234567-89ab-cdef-0123-456789abcdef", "sim", 16 * kGiB, 300 * kMiB});
  TenantRegistry registry{RegistryConfig{dir.path() / "run", dir.path() / "state", 0}, gpus};
  ASSERT_TRUE(registry.prepare().ok());
  auto created = registry.create(nlohmann::json::parse(
      R"({"name":"alpha","devices":[{"gpu":0,"memory_limit":4294967296,"swap":"allow"}]})"));
  ASSERT_TRUE(created.ok()) << created.error();
  Tenant& t = **created;
  t.quota().devices[0].host_reserve = 3 * kGiB;
  const uint32_t slot = *ledger::claim_slot(t.ledger(), 4242, 1);
  t.ledger().host_reserved[slot] = 2 * kGiB;
  const nlohmann::json j = tenant_status_json(t);
  EXPECT_EQ(j["devices"][0]["host_reserve"].get<uint64_t>(), 3 * kGiB);
  EXPECT_EQ(j["host_reserve"].get<uint64_t>(), 3 * kGiB);
  EXPECT_EQ(j["host_reserved"].get<uint64_t>(), 2 * kGiB);
  ASSERT_EQ(j["processes"].size(), 1u);
  EXPECT_EQ(j["processes"][0]["host_reserved"].get<uint64_t>(), 2 * kGiB);
}

}  // namespace
}  // namespace fracgpu::broker
