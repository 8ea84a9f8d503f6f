// A swapped-out borrower whose broker is SIGKILLed, on the simulated 4 GiB GPU: its memory
// comes back without a grant (the shim fails open, like the compute gate) as soon as no
// broker answers and the GPU has the room, and waits for room — never for a broker that is
// gone — when it has not. When a broker is back, the books are right: the borrower's grant
// covers what it holds again, and the guarantee it now breaks is enforced again (its
// memory moves to host once more).
#include <chrono>
#include <cstdio>
#include <thread>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint64_t kBorrowed = 512 * kMiB;
constexpr uint64_t kChunk = 32 * kMiB;
constexpr uint64_t kHolds = kBorrowed + kContext;  // 576 MiB
// 3648 MiB guaranteed: 448 MiB may be borrowed, so 128 MiB (4 allocations) move to host.
constexpr uint64_t kMoved = 128 * kMiB;
constexpr uint64_t kGuarantee = 3648 * kMiB;

class OvercommitBrokerDeath : public OvercommitFixture {
 protected:
  // The borrower holding 512 MiB, 128 MiB of it moved to host for "guaranteed".
  std::unique_ptr<BackgroundProcess> swapped_borrower() {
    borrower_tenant("borrower");
    auto b = start_pattern("borrower", kBorrowed, kChunk, "go", "done");
    lb_ = ledger("borrower");
    EXPECT_NE(lb_, nullptr);
    tenant("guaranteed", std::to_string(kGuarantee), std::to_string(kGuarantee));
    wait_until([&] { return lb_->devices[0].swapped.load() == kMoved; }, std::chrono::seconds(10));
    EXPECT_EQ(lb_->devices[0].swapped.load(), kMoved) << broker_log() << b->err();
    // The demand is settled: the grant follows the borrower down to what it holds (the tick
    // before, it may still have had room for one allocation more).
    wait_until(
        [&] { return status_devices()["borrower"].value("memory_grant", 0ull) == kHolds - kMoved; },
        std::chrono::seconds(3));
    EXPECT_EQ(status_devices()["borrower"].value("memory_grant", 0ull), kHolds - kMoved);
    return b;
  }
  // Milliseconds from `since` until the first allocation coming back is charged again (the
  // shim decided: a reservation, or a charge past the grant when no broker answers), and
  // until it is back on the GPU (its host bytes leave the books).
  std::pair<double, double> ms_until_coming_back(Clock::time_point since, milliseconds limit) {
    auto ms = [&] {
      return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
    };
    wait_until([&] { return lb_->devices[0].used.load() > kHolds - kMoved; }, limit);
    const double decided = ms();
    wait_until([&] { return lb_->devices[0].swapped.load() < kMoved; }, limit);
    return {decided, ms()};
  }
  void expect_intact(BackgroundProcess& b) {
    wait_until([&] { return b.out().find("\"intact\"") != std::string::npos; },
               std::chrono::seconds(10));
    EXPECT_EQ(last_json_line(b.out())["intact"], true) << b.out() << b.err();
  }
  // With no broker: the borrower's ledger says it holds everything, nothing on host, and so
  // does the device.
  void expect_all_back(pid_t pid) {
    EXPECT_EQ(lb_->devices[0].used.load(), kHolds);
    EXPECT_EQ(slot_sum(*lb_), kHolds);
    EXPECT_EQ(lb_->devices[0].swapped.load(), 0u);
    const auto held = device_holdings();
    EXPECT_EQ(held.count(pid) ? held.at(pid) : 0, kHolds);
  }
  // A broker is back: within a few ticks the borrower's grant covers what it holds, the
  // guarantee is enforced again, and status agrees with the ledger.
  void expect_books_after_restart() {
    start_broker();
    ASSERT_FALSE(HasFatalFailure());
    wait_until([&] { return lb_->devices[0].swapped.load() == kMoved; }, std::chrono::seconds(10));
    EXPECT_EQ(lb_->devices[0].swapped.load(), kMoved) << "the guarantee is enforced again\n"
                                                      << broker_log();
    EXPECT_EQ(lb_->devices[0].used.load(), kHolds - kMoved);
    auto devices = status_devices();
    EXPECT_EQ(devices["borrower"].value("memory_used", 0ull), kHolds - kMoved);
    EXPECT_EQ(devices["borrower"].value("memory_swapped", 0ull), kMoved);
    EXPECT_GE(devices["borrower"].value("memory_grant", 0ull), kHolds - kMoved);
    EXPECT_EQ(slot_sum(*lb_), kHolds - kMoved);
  }

  const TenantLedger* lb_ = nullptr;
};

// The borrower waits for its grant (the guarantee keeps the pool short, the GPU itself has
// room) when its broker dies: its memory is back within one wait step.
TEST_F(OvercommitBrokerDeath, AWaitingBorrowerGetsItsMemoryBackWhenTheBrokerDies) {
  auto borrower = swapped_borrower();
  ASSERT_FALSE(HasFailure());
  touch("go");
  std::this_thread::sleep_for(milliseconds(400));
  ASSERT_EQ(lb_->devices[0].swapped.load(), kMoved) << "it waits while the guarantee needs it";
  EXPECT_NE(borrower->err().find("waits for"), std::string::npos) << borrower->err();
  const auto killed = Clock::now();
  kill_broker();
  const auto [decided_ms, first_ms] = ms_until_coming_back(killed, milliseconds(5000));
  expect_intact(*borrower);
  const int64_t resumed_ns = last_json_line(borrower->out()).value("resumed_at_ns", int64_t{0});
  const double all_ms = (static_cast<double>(resumed_ns) -
                         static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 killed.time_since_epoch())
                                                 .count())) /
                        1e6;
  std::printf(
      "broker killed: the shim brings memory back without a grant after %.1f ms, the first "
      "32 MiB are back after %.1f ms, all 128 MiB after %.1f ms\n",
      decided_ms, first_ms, all_ms);
  RecordProperty("fail_open_ms", std::to_string(decided_ms));
  RecordProperty("first_back_ms", std::to_string(first_ms));
  RecordProperty("all_back_ms", std::to_string(all_ms));
  // One wait step (50 ms) and the burst request's connect, which retries a refused
  // connection for 200 ms (TenantSession::request_burst: a restarting broker gets that long).
  EXPECT_LT(decided_ms, 400.0) << "within one wait step and one burst request of the death";
  EXPECT_LT(all_ms, 3000.0) << "never waits for the broker";
  expect_all_back(borrower->pid());
  expect_books_after_restart();
  touch("done");
  EXPECT_EQ(borrower->wait(std::chrono::seconds(10)), 0) << borrower->err();
  wait_until([&] { return lb_->devices[0].used.load() == 0; }, std::chrono::seconds(3));
  expect_books({{"borrower", 0}, {"guaranteed", 0}});
}

// The broker dies first and the GPU is full (the guarantee holds its memory): the
// borrower's next call waits for room, not for the broker, and completes once the room is
// there, with its data intact.
TEST_F(OvercommitBrokerDeath, WithoutABrokerTheNextCallWaitsForRoomNotForTheBroker) {
  auto borrower = swapped_borrower();
  ASSERT_FALSE(HasFailure());
  BackgroundProcess holder(
      {FRACGPU_ALLOC_CLIENT, "hold", "--bytes", std::to_string(kGuarantee - kContext)},
      tenant_env("guaranteed"), file("holder"));
  ASSERT_EQ(
      holder.wait_until_ready([&] { return holder.out().find("\"holding\"") != std::string::npos; },
                              std::chrono::seconds(15)),
      "");
  kill_broker();
  touch("go");
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(lb_->devices[0].swapped.load(), kMoved) << "no room: nothing comes back";
  EXPECT_EQ(lb_->devices[0].used.load(), kHolds - kMoved) << "and nothing is charged for it";
  EXPECT_NE(borrower->err().find("no broker answers and the GPU has no room"), std::string::npos)
      << borrower->err();
  const auto room = Clock::now();
  holder.kill_and_reap();
  const auto [decided_ms, first_ms] = ms_until_coming_back(room, milliseconds(5000));
  expect_intact(*borrower);
  std::printf(
      "no broker: memory coming back %.1f ms after the room was there, the first 32 MiB "
      "back after %.1f ms\n",
      decided_ms, first_ms);
  EXPECT_LT(first_ms, 5000.0) << "it never waits for the broker";
  expect_all_back(borrower->pid());
  expect_books_after_restart();
  touch("done");
  EXPECT_EQ(borrower->wait(std::chrono::seconds(10)), 0) << borrower->err();
}

}  // namespace
}  // namespace fracgpu::testing
