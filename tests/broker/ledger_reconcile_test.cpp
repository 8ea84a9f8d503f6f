// The reclaim rules of tenant_segment.h (layout 1.1) under fire: worker threads play
// tenant processes doing reserve/release step by step exactly as the header prescribes
// (op_seq brackets, slot before counter on reserve, counter before slot on release), the
// test "kills" them at arbitrary steps (a killed worker just stops, leaving its slot and
// the counter as they were) and reclaims the way the broker does, while the others keep
// running. Whenever everyone is between operations the tenant counter must equal exactly
// what the live workers hold.
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

  void start() {
    thread_ = std::thread([this] { loop(); });
  }
  // Dies when it next reaches `point`: 0 between operations, 1-3 inside a reserve,
  // 4-5 inside a release.
  void kill(int point) {
    kill_at_ = point;
    join();
  }
  void stop() {
    stopping_ = true;
    join();
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  uint64_t counted() const { return counted_.load(); }
  uint32_t slot() const { return slot_; }

  bool parked_in(uint64_t e) const { return parked_epoch_.load() == e; }

  // Pausing is by epoch: a worker counts as parked for the current pause only once it
  // has seen that pause's epoch, so a worker still leaving the previous pause can never
  // be mistaken for a parked one.
  static std::atomic<bool> pause;
  static std::atomic<uint64_t> epoch;

 private:
  bool dying() const { return kill_at_.load() >= 0; }
  bool dies_at(int point) const { return kill_at_.load() == point; }

  // Returns false when killed mid-way.
  bool reserve(uint64_t n) {
    auto& slot = t_.ledger->processes[slot_];
    auto& used = t_.ledger->devices[0].used;
    slot.op_seq.fetch_add(1);
    if (dies_at(1)) return false;  // died inside the operation, before touching anything
    slot.used[0].fetch_add(n);
    if (dies_at(2)) return false;  // after the slot add, before the counter
    uint64_t u = used.load();
    for (;;) {
      if (u + n > t_.q().memory_grant.load()) {
        slot.used[0].fetch_sub(n);
        slot.op_seq.fetch_add(1);
        return true;  // refused, nothing held
      }
      if (used.compare_exchange_weak(u, u + n)) break;
    }
    counted_.fetch_add(n);
    held_.push_back(n);
    if (dies_at(3)) return false;  // counted, but the operation never closed
    slot.op_seq.fetch_add(1);
    return true;
  }

  bool release() {
    auto& slot = t_.ledger->processes[slot_];
    const uint64_t n = held_.back();
    held_.pop_back();
    slot.op_seq.fetch_add(1);
    counted_.fetch_sub(n);
    t_.ledger->devices[0].used.fetch_sub(n);
    if (dies_at(4)) return false;  // between the counter and the slot
    slot.used[0].fetch_sub(n);
    if (dies_at(5)) return false;  // before closing the operation
    slot.op_seq.fetch_add(1);
    return true;
  }

  void maybe_pause() {
    while (pause.load() && !dying() && !stopping_.load()) {
      const uint64_t e = epoch.load();
      parked_epoch_.store(e);
      while (pause.load() && epoch.load() == e && !dying() && !stopping_.load())
        std::this_thread::yield();
    }
  }

  void loop() {
    while (!dies_at(0) && !stopping_.load()) {
      maybe_pause();
      const bool ok = (held_.size() < 8 && rng_() % 3 != 0) || held_.empty()
                          ? reserve((rng_() % 16 + 1) * kMiB)
                          : release();
      if (!ok) return;
      if (rng_() % 4 == 0)
        std::this_thread::yield();  // real processes do other work between allocations
    }
  }

  MemoryTenant& t_;
  uint32_t slot_;
  std::mt19937 rng_;
  std::vector<uint64_t> held_;
  std::atomic<uint64_t> counted_{0};
  std::atomic<int> kill_at_{-1};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> parked_epoch_{0};
  std::thread thread_;
};

std::atomic<bool> Worker::pause{false};
std::atomic<uint64_t> Worker::epoch{0};

class ReconcileRace : public ::testing::Test {
 protected:
  static constexpr int kWorkers = 6;
  MemoryTenant tenant{"t", 0, 1024 * kMiB, 512 * kMiB};  // grant 512 MiB: some reservations fail
  std::vector<std::unique_ptr<Worker>> workers;
  int next_pid = 5000;
  int mid_operation_deaths = 0, between_operation_deaths = 0, last_point = -1;

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

  // What the broker does on a death: mark the slot dead and reclaim until it is done.
  void kill_and_reclaim(std::size_t index, int point) {
    workers[index]->kill(point);
    const ProcessSlot& slot = tenant.ledger->processes[workers[index]->slot()];
    (slot.op_seq.load() % 2 ? mid_operation_deaths : between_operation_deaths)++;
    ledger::mark_dead(*tenant.ledger, workers[index]->slot());
    workers.erase(workers.begin() + static_cast<long>(index));
    while (!ledger::reclaim_dead_slots(*tenant.ledger, 100)) std::this_thread::yield();
  }

  // A failed ASSERT returns mid-test: release and stop the workers so that joining
  // them in the destructor cannot hang.
  void TearDown() override {
    resume_all();
    for (auto& w : workers) w->stop();
  }

  void pause_all() {
    const uint64_t e = ++Worker::epoch;
    Worker::pause = true;
    for (const auto& w : workers) {
      while (!w->parked_in(e)) std::this_thread::yield();
    }
  }
  void resume_all() { Worker::pause = false; }
};

TEST_F(ReconcileRace, ExactAfterEveryReclaim) {
  for (int i = 0; i < kWorkers; ++i) spawn(static_cast<unsigned>(i));
  std::mt19937 rng(1234);
  for (int round = 0; round < 1000; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
    last_point = static_cast<int>(rng() % 6);
    kill_and_reclaim(rng() % workers.size(), last_point);
    spawn(static_cast<unsigned>(100 + round));
    pause_all();  // everyone between operations: the counter must be exact after every reclaim
    ASSERT_EQ(ledger::live_slot_sum(*tenant.ledger, 0), truth()) << "round " << round;
    ASSERT_EQ(tenant.used(), truth()) << "round " << round << " last death at point " << last_point;
    resume_all();
  }
  for (auto& w : workers) w->stop();
  EXPECT_EQ(tenant.used(), truth());
  EXPECT_EQ(ledger::live_process_count(*tenant.ledger),
            static_cast<uint32_t>(kWorkers) + 1);  // + fixture's slot
  while (!workers.empty()) kill_and_reclaim(0, 0);
  EXPECT_EQ(tenant.used(), 0u);
  EXPECT_GT(mid_operation_deaths, 10);  // both reclaim paths were exercised
  EXPECT_GT(between_operation_deaths, 10);
}

// A process died mid-operation, so the counter must be recomputed; while any live
// process is inside an operation (odd op_seq) no snapshot is trusted — that is what
// rules out the ABA case a bare CAS of the sum gets wrong (an allocation and a free of
// equal size during the summation leave the counter unchanged but the sum wrong).
TEST(LedgerRecompute, NoSnapshotWhileAProcessIsMidOperation) {
  MemoryTenant t{"t", 0, 64 * kMiB, 64 * kMiB};  // slot 0: the fixture's process
  const uint32_t a = *ledger::claim_slot(*t.ledger, 7001, 1);
  const uint32_t b = *ledger::claim_slot(*t.ledger, 7002, 1);
  ASSERT_TRUE(ledger::reserve(*t.ledger, *t.quota, b, 0, 8 * kMiB));
  const uint32_t dead = *ledger::claim_slot(*t.ledger, 7003, 1);
  t.ledger->processes[dead].op_seq = 1;  // died inside an operation...
  t.ledger->processes[dead].used[0] = 4 * kMiB;
  t.ledger->devices[0].used += 4 * kMiB;  // ...after counting its 4 MiB
  ledger::mark_dead(*t.ledger, dead);
  t.ledger->processes[a].op_seq = 1;  // a live process is mid-allocation: no snapshot possible
  EXPECT_FALSE(ledger::reclaim_dead_slots(*t.ledger, 50));
  EXPECT_EQ(t.ledger->processes[dead].state.load(), static_cast<uint32_t>(SlotState::kDead));
  t.ledger->processes[a].op_seq = 2;
  EXPECT_TRUE(ledger::reclaim_dead_slots(*t.ledger, 50));
  EXPECT_EQ(t.used(), 8 * kMiB);
  EXPECT_EQ(t.ledger->processes[dead].state.load(), static_cast<uint32_t>(SlotState::kFree));
}

TEST(LedgerRecompute, DeathBetweenOperationsIsSubtractedExactly) {
  MemoryTenant t{"t", 0, 64 * kMiB, 64 * kMiB};
  const uint32_t a = *ledger::claim_slot(*t.ledger, 7001, 1);
  const uint32_t busy = *ledger::claim_slot(*t.ledger, 7002, 1);
  ASSERT_TRUE(ledger::reserve(*t.ledger, *t.quota, a, 0, 3 * kMiB));
  ASSERT_TRUE(ledger::reserve(*t.ledger, *t.quota, busy, 0, 5 * kMiB));
  t.ledger->processes[busy].op_seq.fetch_add(1);  // busy forever: a snapshot could never settle
  ledger::mark_dead(*t.ledger, a);
  EXPECT_TRUE(ledger::reclaim_dead_slots(*t.ledger, 1));  // even op_seq: no snapshot needed
  EXPECT_EQ(t.used(), 5 * kMiB);
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
  for (uint32_t i = 1; i < kMaxProcesses; ++i)
    ASSERT_TRUE(ledger::claim_slot(*t.ledger, 10000 + i, 1));
  EXPECT_FALSE(ledger::claim_slot(*t.ledger, 99999, 1));
  t.ledger->processes[7].used[0] = 123;
  t.ledger->devices[0].used = 123;
  ledger::mark_dead(*t.ledger, 7);
  EXPECT_TRUE(ledger::reclaim_dead_slots(*t.ledger, 1));
  EXPECT_EQ(t.used(), 0u);
  EXPECT_EQ(t.ledger->processes[7].used[0].load(), 0u);
  auto slot = ledger::claim_slot(*t.ledger, 99999, 1);
  ASSERT_TRUE(slot);
  EXPECT_EQ(*slot, 7u);
}

}  // namespace
}  // namespace fracgpu::broker
