// The shim's side of a ledger lost under a live process (tenant_segment.h, "A ledger
// lost"): ProcessHoldings keeps what the process holds beside its shared slot and gates
// its operations while a re-registration reads them; the membership check tells a rebuilt
// ledger, a wiped slot and a truncated file apart (the last without a SIGBUS); and a
// TenantSession over a fake broker re-registers with its old slot and its holdings —
// from its watch thread, with no call of the application — mapping a re-created ledger
// file over the old mapping so that its reservations land in the broker's new file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/membership.h"
#include "core/memory_ledger.h"
#include "core/process_holdings.h"
#include "core/tenant_session.h"
#include "fake_broker.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {
namespace {

using namespace std::chrono_literals;
using testing::FakeBroker;
using testing::make_segment;
constexpr uint64_t kMiB = 1ull << 20;

void zero_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::vector<char> zeros(sizeof(TenantLedger), 0);
  ASSERT_EQ(::pwrite(fd, zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
  ::close(fd);
}

// --- ProcessHoldings ---

TEST(ProcessHoldings, CountsWhatTheOperationsMovedPerDevice) {
  ProcessHoldings h;
  {
    ProcessHoldings::Operation op(&h, 0);
    op.add(300 * kMiB);
  }
  {
    ProcessHoldings::Operation op(&h, 2);
    op.add(64 * kMiB);
  }
  {
    ProcessHoldings::Operation op(&h, 0);
    op.remove(100 * kMiB);
  }
  {
    ProcessHoldings::Operation op(&h, 0);  // a swap-out of 2 pages
    op.to_host(2 * kSwapPage);
    op.remove(2 * kSwapPage);
  }
  {
    ProcessHoldings::Operation op(&h, 2);
    op.remove(1000 * kMiB);  // more than it holds: never below zero
  }
  const auto s = h.snapshot();
  EXPECT_EQ(s[0].used, 200 * kMiB - 2 * kSwapPage);
  EXPECT_EQ(s[0].swapped, 2 * kSwapPage);
  EXPECT_EQ(s[2].used, 0u);
  EXPECT_EQ(s[1].used, 0u);
}

TEST(ProcessHoldings, CloseWaitsForOperationsInFlightAndHoldsNewOnesUntilOpen) {
  ProcessHoldings h;
  std::atomic<int> stage{0};
  std::thread inside([&] {
    ProcessHoldings::Operation op(&h, 1);
    stage = 1;
    while (stage.load() != 2) std::this_thread::sleep_for(1ms);
    op.add(5 * kMiB);
  });
  while (stage.load() != 1) std::this_thread::sleep_for(1ms);
  std::atomic<bool> closed{false};
  std::thread closer([&] { closed = h.close(5000); });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(closed.load()) << "close() returned while an operation was in flight";
  stage = 2;
  closer.join();
  inside.join();
  ASSERT_TRUE(closed.load());
  EXPECT_EQ(h.snapshot()[1].used, 5 * kMiB);  // exact: nothing in flight
  std::atomic<bool> done{false};
  std::thread later([&] {
    ProcessHoldings::Operation op(&h, 1);
    op.add(kMiB);
    done = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(done.load()) << "an operation ran while the gate was closed";
  EXPECT_EQ(h.snapshot()[1].used, 5 * kMiB);
  h.open();
  later.join();
  EXPECT_EQ(h.snapshot()[1].used, 6 * kMiB);
}

TEST(ProcessHoldings, CloseGivesUpAndReopensWhenAnOperationDoesNotFinish) {
  ProcessHoldings h;
  std::atomic<bool> release{false};
  std::thread stuck([&] {
    ProcessHoldings::Operation op(&h, 0);
    while (!release.load()) std::this_thread::sleep_for(1ms);
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(h.close(100));
  EXPECT_FALSE(h.closed());
  release = true;
  stuck.join();
}

// --- MemoryLedger with holdings: the copy equals the slot, operation by operation ---

TEST(MemoryLedgerHoldings, TheProcessCopyFollowsItsSlotThroughEveryOperation) {
  auto quota = std::make_unique<TenantQuota>();
  auto ledger = std::make_unique<TenantLedger>();
  quota->device_count = 1;
  quota->devices[0].memory_limit = 8192 * kMiB;
  quota->devices[0].memory_grant = 8192 * kMiB;
  ProcessHoldings h;
  MemoryLedger book(quota.get(), ledger.get(), 4, &h);
  ASSERT_EQ(book.try_reserve(0, 512 * kMiB), ReserveOutcome::kReserved);
  ASSERT_EQ(book.try_reserve(0, 9000 * kMiB), ReserveOutcome::kOverLimit);  // not counted
  book.force_charge(0, 3 * kMiB);
  book.release(0, 100 * kMiB);
  book.moved_to_host(0, 4 * kSwapPage);
  book.left_host(0, kSwapPage);
  const auto s = h.snapshot();
  EXPECT_EQ(s[0].used, ledger->processes[4].used[0].load());
  EXPECT_EQ(s[0].used, 512 * kMiB + 3 * kMiB - 100 * kMiB - 4 * kSwapPage);
  EXPECT_EQ(s[0].swapped, 3 * kSwapPage);
  EXPECT_EQ(s[0].swapped, uint64_t{ledger->schedule[4][0].swapped_pages.load()} * kSwapPage);
  // A re-registration's new slot: the next operation lands there.
  ASSERT_TRUE(h.close(1000));
  book.rebind_slot(9);
  h.open();
  ASSERT_EQ(book.try_reserve(0, kMiB), ReserveOutcome::kReserved);
  EXPECT_EQ(ledger->processes[9].used[0].load(), kMiB);
  EXPECT_EQ(h.snapshot()[0].used, s[0].used + kMiB);
}

// --- The membership check ---

class MembershipLook : public ::testing::Test {
 protected:
  MembershipLook() {
    std::string pattern = "/tmp/fgmw-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
    quota_ = make_segment<TenantQuota>(dir_ + "/quota", kQuotaMagic);
    ledger_ = make_segment<TenantLedger>(dir_ + "/ledger", kLedgerMagic);
    quota_->ledger_incarnation = 77;
    ledger_->processes[6].pid = 4242;
    ledger_->processes[6].start_time = 99;
    ledger_->processes[6].state = static_cast<uint32_t>(SlotState::kLive);
    mine_ = membership_of(*ledger_, 6, 77);
  }
  ~MembershipLook() override {
    ::munmap(quota_, sizeof(TenantQuota));
    ::munmap(ledger_, sizeof(TenantLedger));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  TenantQuota* quota_ = nullptr;
  TenantLedger* ledger_ = nullptr;
  Membership mine_;
};

TEST_F(MembershipLook, RecordsTheSlotAsTheBrokerFilledIt) {
  EXPECT_EQ(mine_.slot, 6u);
  EXPECT_EQ(mine_.pid, 4242);
  EXPECT_EQ(mine_.start_time, 99u);
  EXPECT_EQ(mine_.incarnation, 77u);
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kIntact);
}

TEST_F(MembershipLook, ANewIncarnationIsARebuild) {
  quota_->ledger_incarnation = 78;
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kRebuilt);
}

TEST_F(MembershipLook, AZeroedFileLosesTheSlot) {
  zero_file(dir_ + "/ledger");
  EXPECT_EQ(ledger_->processes[6].pid.load(), 0);
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kSlotLost);
}

TEST_F(MembershipLook, ASlotGivenToAnotherProcessOrAGoneMagicLosesIt) {
  ledger_->processes[6].pid = 5151;
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kSlotLost);
  ledger_->processes[6].pid = 4242;
  ledger_->magic = 0;
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kSlotLost);
}

TEST_F(MembershipLook, ATruncatedFileIsReportedWithoutASigbus) {
  ASSERT_EQ(::truncate((dir_ + "/ledger").c_str(), 0), 0);
  // A plain load of ledger_->magic would raise SIGBUS here; the check must not.
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kUnreadable);
  ASSERT_EQ(::truncate((dir_ + "/ledger").c_str(), sizeof(TenantLedger)), 0);  // re-extended: zeros
  EXPECT_EQ(check_membership(*quota_, *ledger_, mine_), MembershipCheck::kSlotLost);
}

// --- TenantSession re-registering over a fake broker ---

class SessionRejoin : public ::testing::Test {
 protected:
  SessionRejoin() {
    std::string pattern = "/tmp/fgsr-XXXXXX";
    dir_ = ::mkdtemp(pattern.data());
    quota_ = make_segment<TenantQuota>(dir_ + "/quota", kQuotaMagic);
    quota_->device_count = 1;
    quota_->devices[0].memory_limit = 4096 * kMiB;
    quota_->devices[0].memory_grant = 4096 * kMiB;
    quota_->ledger_incarnation = 5;
    ledger_ = make_segment<TenantLedger>(dir_ + "/ledger-a", kLedgerMagic);
    broker_ = std::make_unique<FakeBroker>(dir_ + "/broker.sock",
                                           [this](const std::string& l) { return answer(l); });
  }
  ~SessionRejoin() override {
    broker_.reset();
    ::munmap(quota_, sizeof(TenantQuota));
    ::munmap(ledger_, sizeof(TenantLedger));
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Like the real broker: the slot is filled (pid, start time, Live) before the reply.
  FakeBroker::Reply answer(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.push_back(line);
    TenantLedger* l = serve_ledger_;
    l->processes[slot_].pid = 1000 + static_cast<int32_t>(requests_.size());
    l->processes[slot_].start_time = 7;
    l->processes[slot_].state = static_cast<uint32_t>(SlotState::kLive);
    return {R"({"ok":true,"protocol":2,"tenant":"t","slot":)" + std::to_string(slot_) +
                R"(,"quota":"quota","ledger_fd":true})",
            dir_ + "/" + serve_file_};
  }
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  std::string socket() const { return dir_ + "/broker.sock"; }

  // What the broker's rebuild does to a process that makes no call: a zeroed ledger, a new
  // incarnation, a FUTEX_WAKE. Returns how long until its watch re-registered (or 3 s).
  std::chrono::milliseconds rebuild_under_a_watching_session() {
    serve_ledger_ = ledger_;
    TenantSession session;
    std::string error;
    EXPECT_TRUE(session.attach(socket(), 2000, &error)) << error;  // with its watch
    EXPECT_EQ(session.ledger().try_reserve(0, 256 * kMiB), ReserveOutcome::kReserved);
    zero_file(dir_ + "/ledger-a");
    ledger_->magic = kLedgerMagic;
    ledger_->major = kSegmentMajor;
    ledger_->size = sizeof(TenantLedger);
    const auto bumped = std::chrono::steady_clock::now();
    quota_->ledger_incarnation = 12;
    futex_wake_all(quota_->ledger_incarnation);
    while (requests().size() < 2 && std::chrono::steady_clock::now() - bumped < 3s)
      std::this_thread::sleep_for(2ms);
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 bumped);
  }

  std::string dir_;
  TenantQuota* quota_ = nullptr;
  TenantLedger* ledger_ = nullptr;
  std::mutex mutex_;
  std::vector<std::string> requests_;
  uint32_t slot_ = 3;
  TenantLedger* serve_ledger_ = nullptr;  // the file the broker fills and passes
  std::string serve_file_ = "ledger-a";
  std::unique_ptr<FakeBroker> broker_;
};

TEST_F(SessionRejoin, AZeroedLedgerIsRejoinedWithTheOldSlotAndWhatTheProcessHolds) {
  serve_ledger_ = ledger_;
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error, /*watch=*/false)) << error;
  ASSERT_EQ(session.ledger().try_reserve(0, 300 * kMiB), ReserveOutcome::kReserved);
  ASSERT_EQ(session.ledger().try_reserve(0, 20 * kMiB), ReserveOutcome::kReserved);
  session.ledger().release(0, 20 * kMiB);
  bool rejoined = false;
  EXPECT_EQ(session.check_and_rejoin(&rejoined, &error), MembershipCheck::kIntact);
  EXPECT_FALSE(rejoined);
  EXPECT_EQ(requests().size(), 1u);

  zero_file(dir_ + "/ledger-a");  // the slot and the counters are gone
  ledger_->magic = kLedgerMagic;  // the broker's rebuild stamps the header...
  ledger_->major = kSegmentMajor;
  ledger_->size = sizeof(TenantLedger);
  quota_->ledger_incarnation = 6;  // ...and bumps the incarnation
  EXPECT_EQ(session.check_and_rejoin(&rejoined, &error), MembershipCheck::kRebuilt) << error;
  ASSERT_TRUE(rejoined) << error;
  ASSERT_EQ(requests().size(), 2u);
  EXPECT_EQ(requests()[1],
            R"({"op":"register","protocol":2,"slot":3,"holdings":[{"device":0,"used":)" +
                std::to_string(300 * kMiB) + R"(,"swapped":0}]})");
  // Recorded anew: nothing to do on the next look.
  EXPECT_EQ(session.check_and_rejoin(&rejoined, &error), MembershipCheck::kIntact);
  EXPECT_EQ(requests().size(), 2u);
}

TEST_F(SessionRejoin, ASlotWipedUnderTheProcessIsRejoinedToo) {
  serve_ledger_ = ledger_;
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error, false)) << error;
  ASSERT_EQ(session.ledger().try_reserve(0, 64 * kMiB), ReserveOutcome::kReserved);
  std::memset(static_cast<void*>(&ledger_->processes[3]), 0, sizeof(ProcessSlot));
  bool rejoined = false;
  EXPECT_EQ(session.check_and_rejoin(&rejoined, &error), MembershipCheck::kSlotLost);
  ASSERT_TRUE(rejoined) << error;
  ASSERT_EQ(requests().size(), 2u);
  EXPECT_NE(requests()[1].find(R"("used":)" + std::to_string(64 * kMiB)), std::string::npos)
      << requests()[1];
}

TEST_F(SessionRejoin, ARecreatedLedgerIsMappedOverTheOldOneAtTheSameAddress) {
  serve_ledger_ = ledger_;
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error, false)) << error;
  TenantLedger* const mapped = session.ledger_map();
  ASSERT_EQ(session.ledger().try_reserve(0, 100 * kMiB), ReserveOutcome::kReserved);
  // The broker now serves another file (the old one was deleted and re-created), and gives
  // the process another slot.
  TenantLedger* fresh = make_segment<TenantLedger>(dir_ + "/ledger-b", kLedgerMagic);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    serve_ledger_ = fresh;
    serve_file_ = "ledger-b";
    slot_ = 8;
  }
  ::unlink((dir_ + "/ledger-a").c_str());
  quota_->ledger_incarnation = 9;
  const uint32_t generation = session.slot_generation();
  bool rejoined = false;
  EXPECT_EQ(session.check_and_rejoin(&rejoined, &error), MembershipCheck::kRebuilt);
  ASSERT_TRUE(rejoined) << error;
  EXPECT_EQ(session.ledger_map(), mapped);  // same address...
  EXPECT_EQ(session.slot(), 8u);
  EXPECT_EQ(session.slot_generation(), generation + 1);  // what holds slot pointers rebinds
  // ...now the broker's new file: the next reservation is counted there, in slot 8.
  ASSERT_EQ(session.ledger().try_reserve(0, 10 * kMiB), ReserveOutcome::kReserved);
  EXPECT_EQ(fresh->processes[8].used[0].load(), 10 * kMiB);
  EXPECT_EQ(fresh->devices[0].used.load(), 10 * kMiB);
  EXPECT_EQ(ledger_->processes[3].used[0].load(), 100 * kMiB);  // the old file: untouched
  EXPECT_EQ(session.holdings().snapshot()[0].used, 110 * kMiB);
  ::munmap(fresh, sizeof(TenantLedger));
}

TEST_F(SessionRejoin, TheWatchThreadRejoinsAProcessThatMakesNoCall) {
  rebuild_under_a_watching_session();
  const auto r = requests();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NE(r[1].find(R"("slot":3,"holdings":[{"device":0,"used":)" + std::to_string(256 * kMiB)),
            std::string::npos)
      << r[1];
}

// `timing` (state.cmake): woken by the futex, not found by its 500 ms look.
TEST_F(SessionRejoin, TheWatchIsWokenByTheIncarnationNotByItsPoll) {
  const auto took = rebuild_under_a_watching_session();
  ASSERT_EQ(requests().size(), 2u);
  EXPECT_LT(took.count(), 400) << took.count() << " ms";
}

TEST_F(SessionRejoin, ARestartedBrokerIsRejoinedOnTheNextBurstWithTheHoldings) {
  serve_ledger_ = ledger_;
  TenantSession session;
  std::string error;
  ASSERT_TRUE(session.attach(socket(), 2000, &error, false)) << error;
  ASSERT_EQ(session.ledger().try_reserve(0, 40 * kMiB), ReserveOutcome::kReserved);
  broker_->hang_up();
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(session.request_burst(0, kMiB, &error)) << error;
  const auto r = requests();
  ASSERT_GE(r.size(), 3u);  // register, the burst that met the hang-up... then register again
  bool found = false;
  for (const std::string& line : r)
    found = found || line.find(R"("slot":3,"holdings":[{"device":0,"used":)" +
                               std::to_string(40 * kMiB)) != std::string::npos;
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace fracgpu
