// The compute scheduler in MPS mode (ComputeConfig::mps; docs/design.md "MPS mode"), on
// a simulated clock. Under MPS the tenants' kernels run in one server context: a
// high-priority request does not wait for a context switch but for the lower-class
// kernel that is running when it arrives (measured on the H200: p99 = one batch kernel,
// whatever the batch's queue depth and CUDA_MPS_CLIENT_PRIORITY). So what the scheduler
// changes in MPS mode: the burst guard is off unless mps_burst_guard (it starved batch
// tenants of regular request loops on the H200); with it, its lead can grow by
// mps_guard_lead_us (a launch the guard lets through may sit behind queued work and still
// run when the request comes); and the bound on lower classes behind an active high tenant
// is mps_high_inflight_us (by default the time-slice one). Checked: the published bounds
// and leads, and a closed loop of requests next to a batch tenant on an MPS-like device
// (FIFO between clients, no preemption of a running kernel) where the guard, given an
// extra lead of 800 us and exact kernel times, keeps the requests' p99 well under one
// batch kernel while the batch keeps >= 90 % of the time the requests leave it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/gpu_scheduler.h"
#include "fracgpu/burst_guard.h"  // the shim's decision

namespace fracgpu::broker {
namespace {

constexpr int64_t kUs = 1'000;
constexpr int64_t kMs = 1'000'000;

// A tenant as the scheduler sees it: wants the GPU when told, acknowledges grants at
// once, drains at once (the closed loop below models the GPU's own time).
class Port final : public SchedulingPort {
 public:
  bool wants = true;
  uint64_t burst = 0;
  BurstGuardView guard;

  uint32_t waiting() const override { return wants && !granted() ? 1 : 0; }
  bool launched_since(uint32_t epoch) const override {
    return wants && epoch_at_or_after(grant_epoch(word_), epoch);
  }
  bool drained(uint32_t, uint32_t) const override { return true; }
  bool has_processes() const override { return true; }
  uint32_t current_word() const override { return word_; }
  void publish(uint32_t word, uint32_t limit_us) override {
    word_ = word;
    limit_us_ = limit_us;
  }
  uint64_t burst_start() const override { return burst; }
  void publish_guard(uint64_t next_ns, uint64_t period_ns, uint32_t lead_ns, uint64_t late_ns,
                     uint64_t hold_ns) override {
    guard = BurstGuardView{next_ns, period_ns, lead_ns, late_ns, hold_ns};
  }
  bool granted() const { return (word_ & kGrantGranted) != 0; }
  uint32_t limit_us() const { return limit_us_; }

 private:
  uint32_t word_ = 0;
  uint32_t limit_us_ = 0;
};

// What the closed loop below runs with: MPS mode, the guard (if on) with the extra lead
// that suits the 500 us bound when kernel times are known exactly.
constexpr uint32_t kLoopGuardLeadUs = 800;

ComputeConfig config(bool mps, bool guard = true) {
  ComputeConfig c;
  c.mps = mps;
  c.burst_guard = guard;
  return c;
}

ComputeConfig loop_config(bool guard) {
  ComputeConfig c = config(true, guard);
  c.mps_burst_guard = guard;
  c.mps_guard_lead_us = kLoopGuardLeadUs;
  return c;
}

ComputeSettings normal() {
  return ComputeSettings{100, 0, PriorityClass::kNormal};
}
ComputeSettings high() {
  return ComputeSettings{100, 0, PriorityClass::kHigh};
}

TEST(GpuSchedulerMps, LowerClassesKeepTheMpsBoundWhileAHighTenantIsActive) {
  ComputeConfig c = config(true);
  c.mps_high_inflight_us = 300;  // unlike the default, distinct from the time-slice bound
  GpuScheduler scheduler(c);
  Port batch, latency;
  int64_t now = 1'000 * kMs;
  scheduler.upsert("batch", &batch, normal(), now);
  scheduler.upsert("latency", &latency, high(), now);
  for (int i = 0; i < 10; ++i) scheduler.step(now += kMs);
  EXPECT_TRUE(batch.granted());
  EXPECT_TRUE(latency.granted());
  EXPECT_EQ(batch.limit_us(), 300u);
  // The MPS daemon went down: time slicing again, with its own bound, at the next step.
  scheduler.set_mps(false);
  scheduler.step(now += kMs);
  EXPECT_EQ(batch.limit_us(), ComputeConfig{}.high_inflight_us);
  scheduler.set_mps(true);
  scheduler.step(now += kMs);
  EXPECT_EQ(batch.limit_us(), 300u);
  // Without an active high tenant the mode changes nothing: shared, then contended bounds.
  latency.wants = false;
  for (int i = 0; i < 150; ++i) scheduler.step(now += kMs);
  EXPECT_EQ(batch.limit_us(), ComputeConfig{}.shared_inflight_us);
  Port other;
  scheduler.upsert("other", &other, normal(), now);
  for (int i = 0; i < 5; ++i) scheduler.step(now += kMs);
  EXPECT_EQ(batch.limit_us(), ComputeConfig{}.contended_inflight_us);
}

// With --mps-burst-guard, the same regular rhythm is predicted in both modes; in MPS
// mode the lead is longer by exactly mps_guard_lead_us (here 300 us; 0 by default), and
// nothing else of the guard differs.
TEST(GpuSchedulerMps, TheGuardLeadsByTheQueuedWorkInMpsMode) {
  BurstGuardView published[2];
  for (bool mps : {false, true}) {
    ComputeConfig c = config(mps);
    c.mps_burst_guard = true;
    c.mps_guard_lead_us = 300;
    GpuScheduler scheduler(c);
    Port batch, latency;
    int64_t now = 1'000 * kMs;
    scheduler.upsert("batch", &batch, normal(), now);
    scheduler.upsert("latency", &latency, high(), now);
    for (int burst = 0; burst < 20; ++burst) {
      latency.burst = static_cast<uint64_t>(now);
      for (int i = 0; i < 22; ++i) scheduler.step(now += 100 * kUs);
    }
    ASSERT_NE(batch.guard.next_ns, 0u) << "no prediction published (mps " << mps << ")";
    published[mps ? 1 : 0] = batch.guard;
    published[mps ? 1 : 0].next_ns -= latency.burst;  // compare relative to the last burst
  }
  const BurstGuardView& ts = published[0];
  const BurstGuardView& mps = published[1];
  EXPECT_EQ(mps.lead_ns, ts.lead_ns + 300'000u);
  EXPECT_EQ(mps.next_ns, ts.next_ns);
  EXPECT_EQ(mps.period_ns, ts.period_ns);
  EXPECT_EQ(mps.late_ns, ts.late_ns);
  EXPECT_EQ(mps.hold_ns, ts.hold_ns);
}

// A request loop (one kernel + sync, then think time) of a high tenant next to a batch
// tenant on an MPS device: kernels of the two clients never overlap in a way that helps
// the request (both fill the device), the running kernel is never preempted, and the
// next kernel to start is the earliest-arrived of the request's and the batch's next one
// (which becomes eligible when its previous one ends: stream order). The batch's host
// keeps its in-flight bound like the shim's limiter (launch, then wait while the
// outstanding kernels exceed the bound) and obeys the burst guard (burst_guard.h).
struct MpsLoop {
  static constexpr int64_t kTick = 10 * kUs;
  int64_t kernel_ns = 200 * kUs;  // the batch's (a 4096^2 bf16 matmul on the H200)
  int64_t request_ns = 100 * kUs;
  int64_t think_ns = 2 * kMs;
  int64_t jitter_ns = 200 * kUs;  // think time varies by up to this (fixed seed)  // think time
                                  // varies by up to this (fixed seed)

  explicit MpsLoop(ComputeConfig c) : scheduler(c) {
    scheduler.upsert("batch", &batch, normal(), now);
    scheduler.upsert("latency", &latency, high(), now);
    latency.wants = false;
    arrival = now + think_ns;
  }

  void tick() {
    // The request side.
    if (!in_request && now >= arrival) {
      in_request = true;
      request_waiting = true;
      request_arrived = now;
      latency.wants = true;
      latency.burst = static_cast<uint64_t>(now);
    }
    // The device: the running kernel finishes, then the earliest-arrived waiter starts.
    if (running_end != 0 && now >= running_end) {
      if (running_request) {
        latencies.push_back(now - request_arrived);
        in_request = false;
        latency.wants = false;
        arrival = now + think_ns + jitter();
      } else {
        batch_ns += kernel_ns;
        outstanding.pop_front();
      }
      running_end = 0;
    }
    if (running_end == 0) {
      if (request_waiting) {
        request_waiting = false;
        running_request = true;
        running_end = now + request_ns;
        high_ns += request_ns;
      } else if (!outstanding.empty()) {
        running_request = false;
        running_end = now + kernel_ns;
      }
    }
    latency.wants = in_request;
    scheduler.step(now);
    // The batch's host: launches while within its bound and not held by the guard.
    if (batch.granted()) {
      const double limit_ns = batch.limit_us() * 1000.0;
      const bool within =
          limit_ns == 0 ||
          static_cast<double>(outstanding.size()) * static_cast<double>(kernel_ns) <= limit_ns;
      if (!held && within &&
          guard_holds(batch.guard, now, static_cast<double>(kernel_ns), limit_ns)) {
        held = true;
        held_for = batch.guard;
      }
      if (held && guard_released(held_for, batch.guard, now)) held = false;
      if (!held && within) outstanding.push_back(now);
    }
    now += kTick;
  }
  void run(int64_t duration) {
    for (const int64_t end = now + duration; now < end;) tick();
  }
  int64_t jitter() {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(jitter_ns));
  }
  int64_t p99() const {
    std::vector<int64_t> sorted(latencies.begin() + static_cast<long>(skip), latencies.end());
    std::sort(sorted.begin(), sorted.end());
    return sorted.empty() ? 0 : sorted[(sorted.size() * 99 + 99) / 100 - 1];
  }
  void start_measuring() {
    skip = latencies.size();
    batch_ns = high_ns = 0;
    since = now;
  }
  // The batch's GPU time over the time the requests left it.
  double batch_kept() const {
    return static_cast<double>(batch_ns) / static_cast<double>(now - since - high_ns);
  }

  GpuScheduler scheduler;
  Port batch, latency;
  int64_t now = 1'000 * kMs;
  int64_t arrival = 0, request_arrived = 0, running_end = 0;
  bool in_request = false, request_waiting = false, running_request = false;
  bool held = false;
  BurstGuardView held_for;
  std::deque<int64_t> outstanding;  // the batch's launched kernels, the running one first
  std::vector<int64_t> latencies;
  std::size_t skip = 0;
  int64_t batch_ns = 0, high_ns = 0, since = 0;
  uint64_t seed = 4242;
};

struct LoopResult {
  int64_t p99 = 0;
  double batch_kept = 0;
  std::size_t requests = 0;
};

LoopResult run_loop(ComputeConfig c, int64_t kernel_ns, int64_t jitter_ns) {
  MpsLoop loop(c);
  loop.kernel_ns = kernel_ns;
  loop.jitter_ns = jitter_ns;
  loop.run(500 * kMs);  // the broker learns the rhythm
  loop.start_measuring();
  loop.run(2'600 * kMs);
  return LoopResult{loop.p99(), loop.batch_kept(), loop.latencies.size() - loop.skip};
}

// Plain MPS (no guard; fracgpu's time-slice bounds change nothing a request waits for
// under MPS) against the MPS-mode guard with an extra lead of 800 us
// (--mps-guard-lead-us 800) and the batch's kernel time known exactly (the shim's own
// estimate is not: gpu_scheduler.cpp, apply_guard), for batch kernels of 0.1 to 1.65 ms and think
// times varying by 50 or 200 us. Asserted: the MPS mode is never worse than plain MPS;
// next to 0.2 and 0.4 ms batch kernels (the H200's 4096^2 matmul is 0.2 ms) a request
// waits at most a quarter of a batch kernel at p99 (plain MPS: most of one) while the
// batch keeps >= 90 % of the time the requests leave it. Logged only: 0.1 ms kernels
// (five fit the 500 us bound, and the queue ahead of the last launch outgrows the lead:
// p99 as plain MPS, one short kernel) and 1.65 ms ones (holding back kernels longer than
// a period's slack costs the batch ~20 %, like the time-slice guard on the H200,
// docs/benchmarks.md). With a fixed seed and fixed lengths the loop can phase-lock, so
// plain MPS's figure is asserted only for the asserted cases.
TEST(GpuSchedulerMps, TheGuardKeepsRequestsFromWaitingForABatchKernel) {
  for (const int64_t jitter_ns : {50 * kUs, 200 * kUs}) {
    for (const int64_t kernel_ns : {100 * kUs, 200 * kUs, 400 * kUs, 1650 * kUs}) {
      const LoopResult plain = run_loop(loop_config(/*guard=*/false), kernel_ns, jitter_ns);
      const LoopResult guarded = run_loop(loop_config(/*guard=*/true), kernel_ns, jitter_ns);
      std::printf(
          "[ mps      ] batch kernel %4lld us, think jitter %3lld us: plain MPS p99 %4lld "
          "us, batch kept %.3f | fracgpu MPS p99 %4lld us, batch kept %.3f\n",
          static_cast<long long>(kernel_ns / kUs), static_cast<long long>(jitter_ns / kUs),
          static_cast<long long>(plain.p99 / kUs), plain.batch_kept,
          static_cast<long long>(guarded.p99 / kUs), guarded.batch_kept);
      ASSERT_GT(guarded.requests, 1000u);
      const int64_t request_ns = MpsLoop(config(true)).request_ns;
      EXPECT_LE(guarded.p99, plain.p99) << kernel_ns;
      const bool h200_case = kernel_ns == 200 * kUs || kernel_ns == 400 * kUs;
      if (!h200_case) continue;
      EXPECT_GE(plain.p99, request_ns + kernel_ns * 3 / 4) << kernel_ns << " " << jitter_ns;
      EXPECT_LE(guarded.p99, request_ns + kernel_ns / 4) << kernel_ns << " " << jitter_ns;
      EXPECT_GE(guarded.batch_kept, 0.90) << kernel_ns << " " << jitter_ns;
    }
  }
}

// By default MPS mode has no burst guard: a regular high tenant's rhythm is learned but
// nothing is published to the others (they are never held back), while time-slice mode
// publishes it; the bound behind the high tenant applies in both.
TEST(GpuSchedulerMps, MpsModeHasNoBurstGuardByDefault) {
  for (bool mps : {false, true}) {
    GpuScheduler scheduler(config(mps));
    Port batch, latency;
    int64_t now = 1'000 * kMs;
    scheduler.upsert("batch", &batch, normal(), now);
    scheduler.upsert("latency", &latency, high(), now);
    for (int burst = 0; burst < 20; ++burst) {
      latency.burst = static_cast<uint64_t>(now);
      for (int i = 0; i < 22; ++i) scheduler.step(now += 100 * kUs);
    }
    EXPECT_EQ(batch.guard.next_ns != 0, !mps) << "mps " << mps;
    EXPECT_EQ(batch.limit_us(),
              mps ? ComputeConfig{}.mps_high_inflight_us : ComputeConfig{}.high_inflight_us);
  }
}

}  // namespace
}  // namespace fracgpu::broker
