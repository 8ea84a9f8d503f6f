// The broker's per-tick and per-death work at node scale (bench/broker_scale_bench.cpp has
// the figures): ProcessTracker takes deaths a bounded batch at a time from its own epoll
// set and says so once per batch; its generations move on every watch and death; the
// books check's every-tick part still catches a zeroed counter at once while the forged-
// slot scan slows down only beyond 200 tenants; process_start_time agrees with /proc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/books_check.h"
#include "core/event_loop.h"
#include "core/ledger_ops.h"
#include "core/process_tracker.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using testing::kGiB;
using testing::kMiB;

// Children that wait to be killed, reaped by the destructor.
struct Children {
  std::vector<pid_t> pids;
  explicit Children(int n) {
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        for (;;) ::pause();
      }
      pids.push_back(pid);
    }
  }
  void kill_all() {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);  // exited: their pidfds are readable
    pids.clear();
  }
  ~Children() { kill_all(); }
};

TEST(ProcessTrackerScale, DeathsAreTakenABoundedBatchAtATime) {
  EventLoop loop;
  std::set<uint32_t> dead;
  ProcessTracker tracker(loop, [&](const std::string& tenant, uint32_t slot, pid_t) {
    EXPECT_EQ(tenant, "t");
    dead.insert(slot);
  });
  int batches = 0;
  tracker.set_batch_done([&] { ++batches; });
  constexpr int kCount = ProcessTracker::kDeathsPerTurn + 36;
  Children children(kCount);
  for (int i = 0; i < kCount; ++i) {
    const auto start = process_start_time(children.pids[i]);
    ASSERT_TRUE(start);
    ASSERT_TRUE(tracker.watch("t", static_cast<uint32_t>(i), children.pids[i], *start));
  }
  const uint64_t before = tracker.generation("t");
  EXPECT_EQ(tracker.size(), static_cast<std::size_t>(kCount));
  children.kill_all();
  EXPECT_EQ(tracker.reap_some(), ProcessTracker::kDeathsPerTurn) << "one batch, then the loop";
  EXPECT_EQ(batches, 1);
  EXPECT_EQ(tracker.reap_some(), 36);
  EXPECT_EQ(batches, 2);
  EXPECT_EQ(tracker.reap_some(), 0) << "nothing left";
  EXPECT_EQ(batches, 2) << "no batch without a death";
  EXPECT_EQ(dead.size(), static_cast<std::size_t>(kCount)) << "every slot reported once";
  EXPECT_TRUE(tracker.watches_of("t").empty());
  EXPECT_GT(tracker.generation("t"), before);
}

TEST(ProcessTrackerScale, GenerationsMoveOnWatchAndNeverRepeat) {
  EventLoop loop;
  ProcessTracker tracker(loop, [](const std::string&, uint32_t, pid_t) {});
  EXPECT_EQ(tracker.generation("a"), 0u) << "never watched";
  Children children(1);
  const auto start = process_start_time(children.pids[0]);
  ASSERT_TRUE(start);
  ASSERT_TRUE(tracker.watch("a", 3, children.pids[0], *start));
  const uint64_t watched = tracker.generation("a");
  EXPECT_GT(watched, 0u);
  EXPECT_TRUE(tracker.watch("a", 3, children.pids[0], *start)) << "idempotent";
  EXPECT_EQ(tracker.generation("a"), watched) << "nothing changed";
  EXPECT_EQ(tracker.generation("b"), 0u) << "one tenant's watch is not another's change";
  tracker.forget_tenant("a");
  ASSERT_TRUE(tracker.watch("a", 3, children.pids[0], *start));
  EXPECT_GT(tracker.generation("a"), watched) << "a recreated tenant never sees an old value";
}

TEST(ProcessTrackerScale, AProcessThatIsGoneIsNotWatched) {
  EventLoop loop;
  ProcessTracker tracker(loop, [](const std::string&, uint32_t, pid_t) {});
  Children children(1);
  const pid_t pid = children.pids[0];
  const auto start = process_start_time(pid);
  ASSERT_TRUE(start);
  EXPECT_FALSE(tracker.watch("t", 0, pid, *start + 1)) << "another process's start time";
  children.kill_all();
  EXPECT_FALSE(tracker.watch("t", 0, pid, *start));
  EXPECT_EQ(tracker.size(), 0u);
}

TEST(ProcessStartTime, IsField22OfProcStat) {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  std::getline(in, stat);
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) fields >> field;
  EXPECT_EQ(process_start_time(::getpid()), std::stoull(field));
  EXPECT_FALSE(process_start_time(0));
  EXPECT_FALSE(process_start_time(-5));
}

// One tenant of many as the books check sees it, with one registered process.
struct BooksTenant {
  TenantSpec spec;
  testing::MemoryTenant segments;
  std::vector<WatchedSlot> watched;
  explicit BooksTenant(const std::string& name, const std::string& uuid)
      : segments(name, 0, kGiB, 256 * kMiB) {
    spec.name = name;
    spec.devices.push_back(DeviceSpec{0, kGiB, 256 * kMiB, 100, 0, PriorityClass::kNormal, uuid});
    std::strncpy(segments.quota->tenant, name.c_str(), sizeof segments.quota->tenant - 1);
    DeviceQuota& d = segments.q();
    std::strncpy(d.uuid, uuid.c_str(), sizeof d.uuid - 1);
    d.context_footprint.store(64 * kMiB);
    d.compute_weight.store(100);
    d.priority.store(static_cast<uint32_t>(PriorityClass::kNormal));
    ledger::mark_dead(*segments.ledger, segments.slot);  // MemoryTenant's own "process"
    ledger::reclaim_dead_slots(*segments.ledger, 8);
    segments.slot = *ledger::claim_slot(*segments.ledger, 4242, 777);
    watched = {{segments.slot, 4242, 777}};
    EXPECT_TRUE(segments.reserve(128 * kMiB));
  }
  BooksSubject subject() {
    return BooksSubject{spec, *segments.quota, *segments.ledger, watched, false, [this] {
                          segments.q().memory_limit.store(spec.devices[0].memory_limit);
                        }};
  }
};

class BooksAtScale : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus.gpus.push_back(GpuInfo{0, kUuid, "simulated", 141 * kGiB, 64 * kMiB});
    books = std::make_unique<BooksCheck>(gpus);
    for (int i = 0; i < kTenants; ++i) {
      tenants.push_back(std::make_unique<BooksTenant>("t" + std::to_string(i), kUuid));
      books->note_grants(tenants.back()->spec.name, *tenants.back()->segments.quota);
    }
  }
  // One maintenance tick's books check over every tenant: what it found.
  std::size_t tick() {
    std::size_t found = 0;
    for (auto& t : tenants) found += books->check(t->subject(), now).size();
    return found;
  }

  static constexpr int kTenants = 1000;
  const std::string kUuid = "GPU-66726163-6770-7566-616b-656770750000";
  GpuInventory gpus;
  std::unique_ptr<BooksCheck> books;
  std::vector<std::unique_ptr<BooksTenant>> tenants;
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
};

TEST_F(BooksAtScale, TheFullScanSlowsDownOnlyBeyondTwoHundredTenants) {
  EXPECT_EQ(books->full_scan_period(), 500u) << "1,000 x 512 slots at 1,024 a tick";
  BooksCheck few(gpus);
  few.note_grants("a", *tenants[0]->segments.quota);
  EXPECT_EQ(few.full_scan_period(), static_cast<uint64_t>(BooksCheck::kFullScanEvery));
}

TEST_F(BooksAtScale, EveryTickStillCatchesAZeroedCounterAndARaisedLimit) {
  EXPECT_EQ(tick(), 0u) << "consistent books";
  BooksTenant& victim = *tenants[517];
  victim.segments.ledger->devices[0].used.store(0);
  victim.segments.q().memory_limit.store(64 * kGiB);
  EXPECT_EQ(tick(), 2u) << "found on the very next tick, not at the next full scan";
  EXPECT_EQ(victim.segments.used(), 128 * kMiB) << "repaired to the registered slot's sum";
  EXPECT_GT(books->flag_seconds_left("t517", now), 0);
  EXPECT_EQ(tick(), 0u);
}

TEST_F(BooksAtScale, AForgedSlotIsFoundWithinOneFullScanPeriod) {
  BooksTenant& forger = *tenants[42];
  ProcessSlot& forged = forger.segments.ledger->processes[300];
  forged.pid.store(31337);
  forged.used[0].store(8 * kGiB);
  forged.state.store(static_cast<uint32_t>(SlotState::kLive));
  std::size_t found = 0;
  for (uint64_t t = 0; t < books->full_scan_period() && found == 0; ++t) found = tick();
  EXPECT_EQ(found, 1u);
  EXPECT_EQ(forged.state.load(), static_cast<uint32_t>(SlotState::kFree));
  EXPECT_EQ(forger.segments.used(), 128 * kMiB) << "its bytes never lowered the counter";
}

TEST_F(BooksAtScale, AnOperationInFlightIsSettledNotReported) {
  BooksTenant& busy = *tenants[7];
  ProcessSlot& slot = busy.segments.ledger->processes[busy.segments.slot];
  // A reserve between its two stores: the slot counts 4 KiB more than the counter.
  slot.used[0].fetch_add(4096);
  EXPECT_EQ(tick(), 1u) << "a slot above the counter while between operations is wrong";
  slot.op_seq.fetch_add(1);  // now inside an operation: the snapshot waits for it
  slot.used[0].fetch_add(4096);
  EXPECT_EQ(tick(), 0u) << "unsettled: nothing reported yet";
  slot.used[0].fetch_sub(4096);
  slot.op_seq.fetch_add(1);
  EXPECT_EQ(tick(), 0u) << "settled and consistent";
}

}  // namespace
}  // namespace fracgpu::broker
