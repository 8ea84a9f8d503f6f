// The per-GPU compute scheduler's decisions (broker/core/gpu_scheduler.h) on a
// simulated clock: fake tenants that always (or sometimes) want the GPU, drain a
// fixed time after a revoke, and count the time their work actually ran. Shares,
// work conservation, ceilings, classes and in-flight bounds are checked against the
// time each fake held, not against the scheduler's own bookkeeping.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu_scheduler.h"

namespace fracgpu::broker {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kStepNs = 100'000;  // the simulation advances 0.1 ms at a time

class FakeTenant final : public SchedulingPort {
 public:
  explicit FakeTenant(int64_t drain_ns = 300'000) : drain_ns_(drain_ns) {}

  bool wants = true;
  bool alive = true;
  int64_t ran_ns = 0;  // time its work occupied the GPU (granted and launching, or draining)
  int grants = 0;      // times it was granted the GPU

  uint32_t waiting() const override { return wants && !granted() ? 1 : 0; }
  bool launched_since(uint32_t epoch) const override { return alive && epoch_at_or_after(launched_epoch_, epoch); }
  bool drained(uint32_t, uint32_t revoke_epoch) const override {
    return epoch_at_or_after(drained_epoch_, revoke_epoch);
  }
  bool has_processes() const override { return alive; }
  uint32_t current_word() const override { return word_; }
  void publish(uint32_t word, uint32_t limit_us) override {
    if ((word_ & kGrantGranted) && !(word & kGrantGranted)) draining_until_ = now_ + (in_flight_ ? drain_ns_ : 0);
    if (!(word_ & kGrantGranted) && (word & kGrantGranted)) ++grants;
    word_ = word;
    limit_us_ = limit_us;
  }
  uint64_t burst = 0;  // a high tenant's latest burst start
  uint64_t guard_next = 0, guard_period = 0;
  uint64_t burst_start() const override { return burst; }
  void publish_guard(uint64_t next_ns, uint64_t period_ns, uint32_t, uint64_t, uint64_t) override {
    guard_next = next_ns;
    guard_period = period_ns;
  }
  bool granted() const { return (word_ & kGrantGranted) != 0; }
  uint32_t limit_us() const { return limit_us_; }

  // Advances the fake by one step at time `now` (work runs, launches are acknowledged).
  void tick(int64_t now) {
    now_ = now;
    if (!alive) return;
    if (granted() && wants) {
      launched_epoch_ = grant_epoch(word_);
      in_flight_ = true;
      ran_ns += kStepNs;
    } else if (draining_until_ > now) {
      ran_ns += kStepNs;
    } else if (!granted()) {
      in_flight_ = false;
      drained_epoch_ = grant_epoch(word_);
    }
  }

 private:
  int64_t drain_ns_;
  int64_t now_ = 0;
  int64_t draining_until_ = 0;
  bool in_flight_ = false;
  uint32_t word_ = 0;
  uint32_t limit_us_ = 0;
  uint32_t launched_epoch_ = 0;
  uint32_t drained_epoch_ = 0;
};

struct Simulation {
  GpuScheduler scheduler;
  std::map<std::string, std::unique_ptr<FakeTenant>> tenants;
  int64_t now = 1'000'000'000;

  FakeTenant& add(const std::string& name, ComputeSettings settings, int64_t drain_ns = 300'000) {
    auto& t = tenants[name];
    t = std::make_unique<FakeTenant>(drain_ns);
    scheduler.upsert(name, t.get(), settings, now);
    return *t;
  }
  void run_for(int64_t duration) {
    for (int64_t end = now + duration; now < end; now += kStepNs) {
      for (auto& [name, t] : tenants) t->tick(now);
      scheduler.step(now);
    }
  }
  void reset_counters() {
    for (auto& [name, t] : tenants) t->ran_ns = 0;
  }
  double share(const std::string& name, int64_t window) const {
    return static_cast<double>(tenants.at(name)->ran_ns) / static_cast<double>(window);
  }
};

ComputeSettings weight(uint32_t w, PriorityClass p = PriorityClass::kNormal, uint32_t ceiling = 0) {
  return ComputeSettings{w, ceiling, p};
}

void expect_shares(const std::vector<uint32_t>& weights) {
  Simulation sim;
  uint32_t total = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    sim.add("t" + std::to_string(i), weight(weights[i]));
    total += weights[i];
  }
  sim.run_for(500 * kMs);
  sim.reset_counters();
  const int64_t window = 5000 * kMs;
  sim.run_for(window);
  double sum = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    const double share = sim.share("t" + std::to_string(i), window);
    sum += share;
    EXPECT_NEAR(share, static_cast<double>(weights[i]) / total, 0.01) << "tenant " << i;
  }
  EXPECT_GT(sum, 0.97);
  EXPECT_LE(sum, 1.0 + 1e-9);
}

TEST(GpuScheduler, SharesConvergeToWeights) {
  expect_shares({70, 30});
  expect_shares({50, 50});
  expect_shares({90, 10});
  expect_shares({50, 30, 20});
}

// Real clients pause at host-side synchronisations (no launch, nothing waiting for a
// moment): A's share of the GPU time when both tenants pause for pause_ms after every
// work_ms of their own GPU work.
double share_with_pauses(uint32_t weight_a, uint32_t weight_b, int64_t work_ms, int64_t pause_ms) {
  Simulation sim;
  FakeTenant& a = sim.add("a", weight(weight_a));
  FakeTenant& b = sim.add("b", weight(weight_b));
  const int64_t window = 5000 * kMs;
  struct Pattern {
    FakeTenant* tenant;
    int64_t next_pause_at;  // its own GPU time at which it next pauses
    int64_t resume_at;      // wall time at which a pause ends
  };
  Pattern patterns[] = {{&a, work_ms * kMs, 0}, {&b, work_ms * kMs, 0}};
  for (int64_t t = 0; t < window + 500 * kMs; t += kStepNs) {
    if (t == 500 * kMs) sim.reset_counters();
    for (Pattern& p : patterns) {
      FakeTenant& f = *p.tenant;
      if (f.wants && f.ran_ns >= p.next_pause_at) {
        f.wants = false;
        p.resume_at = sim.now + pause_ms * kMs;
      } else if (!f.wants && sim.now >= p.resume_at) {
        f.wants = true;
        p.next_pause_at = f.ran_ns + work_ms * kMs;
      }
    }
    sim.run_for(kStepNs);
  }
  return static_cast<double>(a.ran_ns) / static_cast<double>(a.ran_ns + b.ran_ns);
}

// Such pauses must not cost a tenant its place in the queue, at any ratio of weights: a
// heavy tenant legitimately runs several slices in a row, and a pause between two of
// them is not idleness (H200: 20/80 with a sync every 8 matmuls gave 27/73 when a pause
// re-placed the heavy tenant one of its own slices behind the light one).
TEST(GpuScheduler, SharesHoldForTenantsThatPauseToSynchronise) {
  EXPECT_NEAR(share_with_pauses(70, 30, 13, 5), 0.70, 0.02);
  EXPECT_NEAR(share_with_pauses(20, 80, 13, 1), 0.20, 0.02);
  EXPECT_NEAR(share_with_pauses(20, 80, 13, 5), 0.20, 0.02);
  EXPECT_NEAR(share_with_pauses(10, 90, 5, 2), 0.10, 0.02);
  EXPECT_NEAR(share_with_pauses(80, 20, 13, 5), 0.80, 0.02);
  EXPECT_NEAR(share_with_pauses(50, 50, 3, 3), 0.50, 0.02);
}

// Under steady contention the GPU changes hands once per slice, whatever the weights:
// giving the GPU back to a tenant owed it must not turn into extra handoffs.
TEST(GpuScheduler, SteadyContentionHandsOverOncePerSlice) {
  for (uint32_t light : {50u, 30u, 20u, 10u}) {
    Simulation sim;
    FakeTenant& a = sim.add("a", weight(light));
    FakeTenant& b = sim.add("b", weight(100 - light));
    sim.run_for(500 * kMs);
    const int before = a.grants + b.grants;
    sim.run_for(1000 * kMs);
    EXPECT_LE(a.grants + b.grants - before, 52) << light << "/" << 100 - light << ": 20 ms slices in 1 s";
  }
}

// Time a tenant used while the others were idle was lent, not owed: when the others
// come back, the shares under contention start at the weights at once.
TEST(GpuScheduler, LentTimeIsNotPaidBack) {
  Simulation sim;
  FakeTenant& a = sim.add("a", weight(50));
  FakeTenant& b = sim.add("b", weight(50));
  b.wants = false;
  sim.run_for(3000 * kMs);  // a runs alone for 3 s
  b.wants = true;
  sim.reset_counters();
  sim.run_for(1000 * kMs);
  EXPECT_NEAR(sim.share("a", 1000 * kMs), 0.50, 0.03);
  EXPECT_NEAR(sim.share("b", 1000 * kMs), 0.50, 0.03);
  (void)a;
}

TEST(GpuScheduler, OnlyOneNormalTenantHoldsAtATime) {
  Simulation sim;
  FakeTenant& a = sim.add("a", weight(50));
  FakeTenant& b = sim.add("b", weight(50));
  for (int i = 0; i < 20000; ++i) {
    sim.run_for(kStepNs);
    ASSERT_FALSE(a.granted() && b.granted()) << "at step " << i;
  }
}

TEST(GpuScheduler, IdleTenantLendsItsTimeAtOnce) {
  Simulation sim;
  sim.add("busy", weight(30));
  FakeTenant& idle = sim.add("idle", weight(70));
  idle.wants = false;
  sim.run_for(100 * kMs);
  sim.reset_counters();
  sim.run_for(2000 * kMs);
  EXPECT_GT(sim.share("busy", 2000 * kMs), 0.99);
  // When the idle tenant comes back it is served within one slice.
  idle.wants = true;
  int64_t waited = 0;
  while (!idle.granted() && waited < 100 * kMs) {
    sim.run_for(kStepNs);
    waited += kStepNs;
  }
  EXPECT_LE(waited, 25 * kMs);
}

TEST(GpuScheduler, HolderThatStopsLaunchingIsRevokedWhenOthersWait) {
  Simulation sim;
  FakeTenant& a = sim.add("a", weight(50));
  FakeTenant& b = sim.add("b", weight(50));
  b.wants = false;
  sim.run_for(10 * kMs);
  ASSERT_TRUE(a.granted());
  a.wants = false;
  b.wants = true;
  sim.run_for(8 * kMs);  // well before a's slice would end
  EXPECT_TRUE(b.granted());
}

TEST(GpuScheduler, CeilingCapsALoneTenant) {
  Simulation sim;
  sim.add("capped", weight(100, PriorityClass::kNormal, 30));
  sim.run_for(200 * kMs);
  sim.reset_counters();
  sim.run_for(5000 * kMs);
  EXPECT_NEAR(sim.share("capped", 5000 * kMs), 0.30, 0.01);
}

TEST(GpuScheduler, LowPriorityGetsOnlyUnwantedTimeButNeverStarves) {
  Simulation sim;
  sim.add("normal", weight(10));
  FakeTenant& low = sim.add("low", weight(100, PriorityClass::kLow));
  sim.run_for(10000 * kMs);
  // Only anti-starvation slices: one 20 ms slice per ~2 s of waiting.
  EXPECT_GT(low.ran_ns, 0);
  EXPECT_LT(sim.share("low", 10000 * kMs), 0.03);
  sim.tenants["normal"]->wants = false;
  sim.reset_counters();
  sim.run_for(1000 * kMs);
  EXPECT_GT(sim.share("low", 1000 * kMs), 0.95);
}

TEST(GpuScheduler, HighTenantIsAlwaysGrantedAndBoundsOthersInFlight) {
  Simulation sim;
  FakeTenant& batch = sim.add("batch", weight(100));
  FakeTenant& high = sim.add("latency", weight(100, PriorityClass::kHigh));
  high.wants = false;
  sim.run_for(50 * kMs);
  EXPECT_TRUE(high.granted());
  EXPECT_EQ(batch.limit_us(), ComputeConfig{}.shared_inflight_us);  // others exist but are idle
  high.wants = true;
  sim.run_for(1 * kMs);
  EXPECT_TRUE(high.granted());
  EXPECT_TRUE(batch.granted());
  EXPECT_EQ(batch.limit_us(), ComputeConfig{}.high_inflight_us);
  high.wants = false;
  sim.run_for(200 * kMs);  // past high_hold: the bound is lifted again
  EXPECT_EQ(batch.limit_us(), ComputeConfig{}.shared_inflight_us);
}

// A high tenant with a regular rhythm gets its next burst predicted to the others;
// an irregular one does not.
TEST(GpuScheduler, RegularHighBurstsArePredictedToOthers) {
  Simulation sim;
  FakeTenant& batch = sim.add("batch", weight(100));
  FakeTenant& high = sim.add("latency", weight(100, PriorityClass::kHigh));
  const int64_t period = 2'200'000;
  for (int i = 0; i < 20; ++i) {
    high.burst = static_cast<uint64_t>(sim.now);
    sim.run_for(period);
  }
  EXPECT_NEAR(static_cast<double>(batch.guard_period), static_cast<double>(period), 50'000.0);
  EXPECT_EQ(batch.guard_next, high.burst + batch.guard_period);
  // Requests that sometimes waited behind other work stretch some gaps: the
  // prediction stays at the shortest one (a request served at once).
  for (int i = 0; i < 20; ++i) {
    high.burst = static_cast<uint64_t>(sim.now);
    sim.run_for(i % 3 == 0 ? period + 1'500'000 : period);
  }
  EXPECT_NEAR(static_cast<double>(batch.guard_period), static_cast<double>(period), 50'000.0);
  // Irregular bursts (1, 5, 2, 9 ms apart...) withdraw the prediction.
  const int64_t gaps[] = {1, 5, 2, 9, 1, 7, 3, 8, 2, 6, 1, 9};
  for (int64_t gap : gaps) {
    high.burst = static_cast<uint64_t>(sim.now);
    sim.run_for(gap * kMs);
  }
  EXPECT_EQ(batch.guard_period, 0u);
  EXPECT_EQ(batch.guard_next, 0u);
}

TEST(GpuScheduler, LoneTenantHasNoInFlightBound) {
  Simulation sim;
  FakeTenant& only = sim.add("only", weight(30));
  sim.run_for(50 * kMs);
  EXPECT_TRUE(only.granted());
  EXPECT_EQ(only.limit_us(), 0u);
}

TEST(GpuScheduler, DeadHolderDoesNotStallOthers) {
  Simulation sim;
  FakeTenant& a = sim.add("a", weight(50), 10'000 * kMs);  // would never finish draining
  FakeTenant& b = sim.add("b", weight(50));
  while (!a.granted()) sim.run_for(kStepNs);
  sim.run_for(2 * kMs);
  a.alive = false;
  int64_t waited = 0;
  while (!b.granted() && waited < 2000 * kMs) {
    sim.run_for(kStepNs);
    waited += kStepNs;
  }
  EXPECT_LT(waited, 25 * kMs);
}

TEST(GpuScheduler, WeightChangeTakesEffectQuickly) {
  Simulation sim;
  sim.add("a", weight(50));
  sim.add("b", weight(50));
  sim.run_for(1000 * kMs);
  sim.scheduler.upsert("a", sim.tenants["a"].get(), weight(90), sim.now);
  sim.run_for(200 * kMs);
  sim.reset_counters();
  sim.run_for(2000 * kMs);
  EXPECT_NEAR(sim.share("a", 2000 * kMs), 90.0 / 140.0, 0.02);  // b keeps weight 50
}

TEST(GpuScheduler, StatusReportsMeasuredShare) {
  Simulation sim;
  sim.add("a", weight(70));
  sim.add("b", weight(30));
  sim.run_for(3000 * kMs);
  auto a = sim.scheduler.status("a", sim.now);
  ASSERT_TRUE(a.has_value());
  EXPECT_NEAR(a->measured_share, 0.70, 0.03);
  EXPECT_GT(a->gpu_seconds, 1.5);
  EXPECT_FALSE(sim.scheduler.status("nobody", sim.now).has_value());
}

}  // namespace
}  // namespace fracgpu::broker
