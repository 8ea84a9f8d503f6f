// The reconcile rule of tenant_segment.h under fire: worker threads play tenant
// processes doing reserve/release step by step exactly as the header prescribes, the
// test "kills" them at arbitrary steps (a killed worker just stops, leaving its slot and
// the counter as they were) and reconciles the way the broker does, while the others
// keep running. The device counter must never fall below what live workers really hold,
// and must equal it once everyone is quiet and one more reconcile ran.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/ledger_ops.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kMiB;
using testing::MemoryTenant;

// One simulated process. `counted` is its true contribution to DeviceUsage.used:
// raised right after its CAS succeeds, lowered right before its release's fetch_sub.
class Worker {
 public:
  Worker(MemoryTenant& t, uint32_t slot, unsigned seed) : t_(t), slot_(slot), rng_(seed) {}
  ~Worker() { join(); }

  void start() { thread_ = std::thread([this] { loop(); }); }
  void kill() { killed_ = true; join(); }
  void stop() { stopping_ = true; join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  uint64_t counted() const { return counted_.load(); }
  uint32_t slot() const { return slot_; }

  static std::atomic<bool> pause;
  static std::atomic<int> paused;

 private:
  bool dead() const { return killed_.load(); }

  // Returns false when killed mid-way.
  bool reserve(uint64_t n) {
    auto& slot_used = t_.ledger->processes[slot_].used[0];
    auto& used = t_.ledger->devices[0].used;
    slot_used.fetch_add(n);
    if (dead()) return false;  // died after the slot add, before the counter
    uint64_t u = used.load();
    for (;;) {
      if (u + n > t_.q().memory_grant.load()) {
        slot_used.fetch_sub(n);
        return true;  // refused, nothing held
      }
      if (used.compare_exchange_weak(u, u + n)) break;
    }
    counted_.fetch_add(n);
    held_.push_back(n);
    return !dead();
  }

  bool release() {
    const uint64_t n = held_.back();
    held_.pop_back();
    counted_.fetch_sub(n);
    t_.ledger->devices[0].used.fetch_sub(n);
    if (dead()) return false;  // died between the counter and the slot
    t_.ledger->processes[slot_].used[0].fetch_sub(n);
    return true;
  }

  void maybe_pause() {
    if (!pause.load()) return;
    paused.fetch_add(1);
    while (pause.load() && !dead() && !stopping_.load()) std::this_thread::yield();
    paused.fetch_sub(1);
  }

  void loop() {
    while (!dead() && !stopping_.load()) {
      maybe_pause();
      const bool ok = (held_.size() < 8 && rng_() % 3 != 0) || held_.empty()
                          ? reserve((rng_() % 16 + 1) * kMiB)
                          : release();
      if (!ok) return;
    }
  }

  MemoryTenant& t_;
  uint32_t slot_;
  std::mt19937 rng_;
  std::vector<uint64_t> held_;
  std::atomic<uint64_t> counted_{0};
  std::atomic<bool> killed_{false}, stopping_{false};
  std::thread thread_;
};

std::atomic<bool> Worker::pause{false};
std::atomic<int> Worker::paused{0};

class ReconcileRace : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 6;
  MemoryTenant tenant{"t", 0, 1024 * kMiB, 512 * kMiB};  // grant 512 MiB: some reservations fail
  std::vector<std::unique_ptr<Worker>> workers;
  int next_pid = 5000;

  void spawn(unsigned seed) {
    auto slot = ledger::claim_slot(*tenant.ledger, next_pid++, 1);
    ASSERT_TRUE(slot.has_value());
    workers.push_back(std::make_unique<Worker>(tenant, *slot, seed));
    workers.back()->start();
  }

  uint64_t truth() const {
    uint64_t sum = 0;
    for (const auto& w : workers) sum += w->counted();
    return sum;
  }

  // What the broker does on a death: mark dead, reconcile until it sticks, free slots.
  void kill_and_reclaim(std::size_t index) {
    workers[index]->kill();
    ledger::mark_dead(*tenant.ledger, workers[index]->slot());
    workers.erase(workers.begin() + static_cast<long>(index));
    while (!ledger::reconcile_all(*tenant.ledger, 1, 1000)) std::this_thread::yield();
    ledger::free_dead_slots(*tenant.ledger);
  }

  void pause_all() {
    Worker::pause = true;
    while (Worker::paused.load() < static_cast<int>(workers.size())) std::this_thread::yield();
  }
  void resume_all() { Worker::pause = false; }
};

TEST_F(ReconcileRace, NeverUnderCountsAndSettlesExactly) {
  for (int i = 0; i < kWorkers; ++i) spawn(static_cast<unsigned>(i));
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    kill_and_reclaim(rng() % workers.size());
    spawn(static_cast<unsigned>(100 + round));
    if (round % 10 == 0) {
      pause_all();  // quiescent: everything counted is really held by a live worker
      const uint64_t used = tenant.used();
      ASSERT_GE(used, truth()) << "round " << round;
      ASSERT_TRUE(ledger::reconcile_all(*tenant.ledger, 1, 1));
      ASSERT_EQ(tenant.used(), truth()) << "round " << round;
      ASSERT_EQ(ledger::live_slot_sum(*tenant.ledger, 0), truth());
      resume_all();
    }
  }
  for (auto& w : workers) w->stop();
  ASSERT_TRUE(ledger::reconcile_all(*tenant.ledger, 1, 1));
  EXPECT_EQ(tenant.used(), truth());
  EXPECT_EQ(ledger::live_process_count(*tenant.ledger), static_cast<uint32_t>(kWorkers) + 1);  // + fixture's slot
  while (!workers.empty()) kill_and_reclaim(0);
  EXPECT_EQ(tenant.used(), 0u);
}

TEST(LedgerSlots, ClaimReusesLiveSlotOfSameProcess) {
  MemoryTenant t{"t", 0, kMiB, kMiB};
  auto a = ledger::claim_slot(*t.ledger, 42, 777);
  auto again = ledger::claim_slot(*t.ledger, 42, 777);
  auto reused_pid = ledger::claim_slot(*t.ledger, 42, 778);  // same pid, later process
  ASSERT_TRUE(a && again && reused_pid);
  EXPECT_EQ(*a, *again);
  EXPECT_NE(*a, *reused_pid);
  EXPECT_EQ(t.ledger->processes[*a].pid.load(), 42);
  EXPECT_EQ(t.ledger->processes[*a].start_time.load(), 777u);
}

TEST(LedgerSlots, FullLedgerRefusesAndDeadSlotsAreFreed) {
  MemoryTenant t{"t", 0, kMiB, kMiB};  // slot 0 taken by the fixture
  for (uint32_t i = 1; i < kMaxProcesses; ++i) ASSERT_TRUE(ledger::claim_slot(*t.ledger, 10000 + i, 1));
  EXPECT_FALSE(ledger::claim_slot(*t.ledger, 99999, 1));
  t.ledger->processes[7].used[0] = 123;
  ledger::mark_dead(*t.ledger, 7);
  ledger::free_dead_slots(*t.ledger);
  EXPECT_EQ(t.ledger->processes[7].used[0].load(), 0u);
  auto slot = ledger::claim_slot(*t.ledger, 99999, 1);
  ASSERT_TRUE(slot);
  EXPECT_EQ(*slot, 7u);
}

}  // namespace
}  // namespace fracgpu::broker
