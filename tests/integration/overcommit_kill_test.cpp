// A borrower SIGKILLed in the middle of a move to host or back, on the simulated 4 GiB GPU:
// its copies are slowed to 2 GB/s (FAKECUDA_COPY_BANDWIDTH, its process only) so that a
// 256 MiB move takes a few hundred milliseconds, and each round kills it after a random
// number of its 16 MiB allocations moved plus a random delay. Beside it a tenant holds
// patterned memory and another launches kernels for the whole test. After every kill: the
// killed process's device memory and its bytes on host are gone from every book (its
// ledger, `fracgpu status --json`, the device, the node's host-budget sum), the others hold
// exactly what they held; at the end the guarantee is whole and the others' data intact.
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "overcommit_fixture.h"

namespace fracgpu::testing {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kBorrowed = 512 * kMiB;
constexpr uint64_t kChunk = 16 * kMiB;
constexpr uint64_t kMoved = 256 * kMiB;  // what the guarantee needs moved
constexpr uint64_t kSteady = 256 * kMiB;
constexpr int kRoundsEach = 4;

class OvercommitKill : public OvercommitFixture {
 protected:
  void SetUp() override {
    OvercommitFixture::SetUp();
    // steady 512 + spin 64 guaranteed: 3520 MiB may be borrowed until "guaranteed" asks
    // for 3200 MiB; then 320, and a borrower holding 576 must move 256.
    tenant("steady", "512MiB", "512MiB");
    tenant("spin", "256MiB", "64MiB");
    tenant("guaranteed", "3200MiB", "0");
    borrower_tenant("borrower");
    steady_ = start_pattern("steady", kSteady, 64 * kMiB, "steady-go", "steady-done");
    spin_ = std::make_unique<BackgroundProcess>(
        std::vector<std::string>{FRACGPU_SPIN_CLIENT, "--kernel-us", "1000", "--seconds", "300",
                                 "--stream-sync-every", "4"},
        tenant_env("spin"), file("spin"));
  }

  std::unique_ptr<BackgroundProcess> slow_borrower(const std::string& go) {
    return start_pattern("borrower", kBorrowed, kChunk, go, "", "alloc",
                         {{"FAKECUDA_COPY_BANDWIDTH", "2GB"}});
  }

  // What every book must say after `victim` was killed.
  void expect_nothing_left_of(pid_t victim, int round) {
    const TenantLedger* lb = ledger("borrower");
    ASSERT_NE(lb, nullptr);
    wait_until(
        [&] {
          return lb->devices[0].used.load() == 0 && lb->devices[0].swapped.load() == 0 &&
                 live_slots(*lb) == 0;
        },
        std::chrono::seconds(5));
    EXPECT_EQ(live_slots(*lb), 0u) << "round " << round;
    expect_books({{"borrower", 0}, {"steady", kSteady + kContext}, {"spin", kContext}});
    uint64_t on_host = 0;  // what the host budget counts, over every tenant
    for (const auto& [name, d] : status_devices()) on_host += d.value("memory_swapped", 1);
    EXPECT_EQ(on_host, 0u) << "round " << round;
    const auto held = device_holdings();
    EXPECT_EQ(held.count(victim), 0u) << "round " << round << ": the killed process's memory";
    EXPECT_EQ(held.count(steady_->pid()) ? held.at(steady_->pid()) : 0, kSteady + kContext);
    EXPECT_EQ(held.count(spin_->pid()) ? held.at(spin_->pid()) : 0, kContext);
    EXPECT_TRUE(steady_->running() && spin_->running()) << "round " << round;
  }

  // Returns the borrower's bytes on host at the kill.
  uint64_t kill_when(BackgroundProcess& victim, const std::function<bool()>& reached,
                     milliseconds extra) {
    wait_until(reached, std::chrono::seconds(10));
    std::this_thread::sleep_for(extra);
    const uint64_t on_host = ledger("borrower")->devices[0].swapped.load();
    victim.kill_now(SIGKILL);
    victim.wait(std::chrono::seconds(5));
    return on_host;
  }

  std::unique_ptr<BackgroundProcess> steady_, spin_;
};

TEST_F(OvercommitKill, KilledDuringTheMoveToHostOrBackLosesNothingOfOthers) {
  const TenantLedger* lb = ledger("borrower");
  ASSERT_NE(lb, nullptr);
  std::mt19937 rng(20261214);
  int mid_out = 0, mid_in = 0;
  const auto begin = std::chrono::steady_clock::now();
  for (int round = 0; round < 2 * kRoundsEach; ++round) {
    const bool during_out = round % 2 == 0;
    const std::string go = "go-" + std::to_string(round);
    auto victim = slow_borrower(go);
    ASSERT_FALSE(HasFailure()) << "round " << round;
    ASSERT_EQ(lb->devices[0].used.load(), kBorrowed + kContext);
    // Killed once 1..15 of the 16 allocations to move have moved (plus up to 10 ms).
    const uint64_t after = (1 + rng() % (kMoved / kChunk - 1)) * kChunk;
    const milliseconds extra(rng() % 10);
    set_request("guaranteed", "3200MiB");
    uint64_t at_kill = 0;
    if (during_out) {
      at_kill = kill_when(
          *victim, [&] { return lb->devices[0].swapped.load() >= after; }, extra);
      mid_out += at_kill < kMoved;
    } else {
      wait_until([&] { return lb->devices[0].swapped.load() == kMoved; }, std::chrono::seconds(10));
      ASSERT_EQ(lb->devices[0].swapped.load(), kMoved) << broker_log();
      set_request("guaranteed", "0");  // the memory may come back
      touch(go);
      at_kill = kill_when(
          *victim, [&] { return lb->devices[0].swapped.load() <= kMoved - after; }, extra);
      mid_in += at_kill > 0;
    }
    std::printf("round %d: killed during the move %s with %llu MiB on host\n", round,
                during_out ? "to host" : "back", static_cast<unsigned long long>(at_kill >> 20));
    expect_nothing_left_of(victim->pid(), round);
    ASSERT_FALSE(HasFailure()) << "round " << round << "\n" << broker_log();
    if (during_out) set_request("guaranteed", "0");
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::printf("%d kills in %.1f s: %d with the move to host unfinished, %d with the move back\n",
              2 * kRoundsEach, seconds, mid_out, mid_in);
  RecordProperty("kills_mid_swap_out", mid_out);
  RecordProperty("kills_mid_swap_in", mid_in);
  // Most kills must land inside a move for the test to mean anything.
  EXPECT_GE(mid_out, kRoundsEach / 2);
  EXPECT_GE(mid_in, kRoundsEach / 2);

  // The guarantee is whole: every byte of it, at once.
  set_request("guaranteed", "3200MiB");
  ProcessResult fill =
      run_process({FRACGPU_ALLOC_CLIENT, "fill", "--chunk", std::to_string(64 * kMiB)},
                  tenant_env("guaranteed"));
  ASSERT_EQ(fill.exit_code, 0) << fill.out << fill.err;
  EXPECT_EQ(last_json_line(fill.out)["allocated"].get<uint64_t>(), 3200 * kMiB - kContext);
  // And the others lost nothing: the data is intact, the launches never failed.
  touch("steady-go");
  wait_until([&] { return steady_->out().find("\"intact\"") != std::string::npos; },
             std::chrono::seconds(10));
  EXPECT_EQ(last_json_line(steady_->out())["intact"], true) << steady_->out() << steady_->err();
  spin_->kill_now(SIGTERM);
  const int status = spin_->wait(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << spin_->err();
  touch("steady-done");
  EXPECT_EQ(steady_->wait(std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace fracgpu::testing
