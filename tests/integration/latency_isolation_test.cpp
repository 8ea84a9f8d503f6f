// Latency isolation on the simulated GPU (DESIGN.md "Compute quotas", docs/design.md "High
// priority" and "MPS mode"): the real broker, time-sliced or --mps over the simulated MPS
// daemon, a `--priority high` tenant serving requests (fracgpu-spin-client: one 100 us
// kernel of the whole device + a synchronize per request; regular, Poisson or burst
// arrivals) next to a batch tenant of back-to-back kernels of 0.05, 0.2, 1 or 2 ms, every
// process with the shim preloaded. Each case measures, in one run, one after the other:
//   * the batch alone: its busy fraction of the device (`fakecuda-ctl status`);
//   * per arrival pattern, the request loop alone while the same batch runs on a private
//     simulated device of its own (so the host is loaded alike, the device is not), then
//     the loop next to the batch on the test's device, with the batch's busy fraction
//     meanwhile. Latencies (p50/p90/p99) are the client's own, submission to completion.
// The wait the design promises a high request is the lower classes' in-flight bound
// (500 us behind an active high tenant, in both modes) plus one running batch kernel: a
// high tenant is never held at the gate, so no broker tick is in its way. Asserted, with
// every figure in the message and in a "[ latency  ]" line (see LatencyBound):
//   p50, p90 and p99 with the batch <= the same percentile alone + the wait + a margin
//   (300 us, 500 us, 2.5 ms: the host's share of a latency on a loaded 2-core machine);
//   the batch keeps >= 0.55 of its busy fraction alone; where the burst guard engages
//   (time-sliced, 1 ms kernels, regular arrivals) the median request does not wait.
// One exception, measured and kept visible: time-sliced next to kernels shorter than the
// in-flight bound (0.05 and 0.2 ms) the batch always has a kernel queued, so the device
// switches to the high tenant's context only at its own timeslice (2 ms; on the H200 the
// same: docs/benchmarks.md "Latency isolation"); there the asserted wait is the device's
// timeslice and the log says what the design promised.
// A loaded machine stalls processes for milliseconds at random: a pattern whose checks
// fail is measured again, up to three times, and fails if no attempt passes. An attempt
// during which the host was overloaded (HostProbe, kLoadPerCoreLimit) does not count; a
// case whose failed attempts were all overloaded is skipped, saying so. A scheduler that
// loses the isolation fails every attempt: without `high` the requests wait for the
// batch's 20 ms slices (p99 10-31 ms measured, the batch left 0.25-0.49 of the device).
// All of it is `timing` (tests/timing.cmake); LatencySmoke keeps the paths (each arrival
// pattern served beside a batch, in both modes) covered under the sanitizers with bounds
// that only catch a hang. To check that the bounds have teeth, two variables rerun the
// suite against a degraded setup: FRACGPU_LATENCY_SERVE_PRIORITY (the request tenant's
// class, default high) and FRACGPU_LATENCY_BROKER_ARGS (extra broker flags, split at
// spaces, e.g. "--high-inflight-us 100000 --mps-high-inflight-us 100000").
// Timing-sensitive: RUN_SERIAL; the suite takes 70-90 s.
#include <iomanip>
#include <string>
#include <vector>

#include "latency_fixture.h"

namespace fracgpu::testing::latency {
namespace {

// --high-inflight-us and --mps-high-inflight-us, the broker's defaults (gpu_scheduler.h).
constexpr uint32_t kInflightBoundUs = 500;
constexpr uint64_t kMinRequests = 300;  // counted per run: p99 is then the 4th-worst or worse
constexpr int kAttempts = 3;
// An attempt does not count (see "overloaded" in the banner) when the host woke
// HostProbe's thread later than this at p90 in either run: 70-150 us is usual at any load,
// 0.8-2.6 ms came with the attempts of the 0.05 ms cases that failed at load 7-9 ...
constexpr uint64_t kHostLateP90LimitUs = 500;
// ... or when the load average exceeds this many runnable threads per core: the simulated
// device's executors are host threads and spin the end of every kernel, and at load 7-9 on
// 2 cores the 0.05 ms cases failed with the probe's p90 as low as 180 us (one core spun
// by the batch's executor, the requests' threads and the simulated MPS server waiting
// for the other). All passed at once at load 3.5-4.9 (the test itself brings ~2.5).
constexpr double kLoadPerCoreLimit = 3;

struct LatencyCase {
  const char* name;
  Mode mode;
  uint32_t batch_kernel_us;
  const char* batch_priority;
  bool bursts;  // also the burst pattern
  // Time-sliced next to kernels shorter than the in-flight bound: the wait is the
  // device's timeslice, not the design's promise (see the banner).
  bool waits_for_device_timeslice = false;
  // Time-sliced, regular arrivals: the burst guard holds the batch before each predicted
  // request, so the median request does not wait at all (see LatencyBound).
  bool guarded_regular = false;
};

std::ostream& operator<<(std::ostream& out, const LatencyCase& c) {
  return out << c.name;
}

// What a high request may wait for beside the batch, and the margins for the host.
struct LatencyBound {
  // Margins over "alone + wait": the host's share, i.e. wake-ups of the client's threads
  // and of the simulated device's executors, which compete for 2 loaded cores with the
  // batch's (whose executor spins through the last 50 us of every kernel) and the broker.
  // Measured at load 1-5 (other builds running), over the alone + wait sums: p50 at
  // most +50 us, p90 +60 us, p99 up to +2.3 ms (one 1-3 ms stall of any of five
  // processes is 1 % of ~400 requests). A loss of isolation costs a 20 ms slice.
  static constexpr uint64_t kP50MarginUs = 300;
  static constexpr uint64_t kP90MarginUs = 500;
  static constexpr uint64_t kP99MarginUs = 2500;
  // The batch's busy fraction beside the requests over its fraction alone. The requests
  // take 5-10 % of the device; the burst guard holds the batch before each predicted
  // regular request (up to ~25 % next to 2 ms kernels, which never fit the gap); a
  // 1 s window's busy fraction moves by +-10 % on the loaded machine (most for 0.05 ms
  // kernels under MPS, where the simulated server's threads share the host). Measured
  // 0.67-1.8; without `high` the request tenant's slices leave the batch 0.18-0.49.
  static constexpr double kBatchKept = 0.55;

  // Where the burst guard shields regular requests (time-sliced, 1 ms kernels: two of
  // them do not fit the in-flight bound, so the batch's queue runs dry before a predicted
  // request): p50 beside the batch <= p50 alone + this. Measured -40..+30 us; with the
  // in-flight bound lifted (--high-inflight-us 100000) the guard misses: +900 us.
  static constexpr uint64_t kGuardedP50MarginUs = 300;

  uint64_t promised_us = 0;  // in-flight bound + one batch kernel
  uint64_t wait_us = 0;      // what the test asserts
  bool guarded_regular = false;

  static LatencyBound of(const LatencyCase& c, uint64_t device_timeslice_us) {
    LatencyBound b;
    b.promised_us = kInflightBoundUs + c.batch_kernel_us;
    b.wait_us =
        c.waits_for_device_timeslice ? std::max(b.promised_us, device_timeslice_us) : b.promised_us;
    b.guarded_regular = c.guarded_regular;
    return b;
  }
};

// One attempt of one arrival pattern: the loop alone (the batch loading the host from a
// device of its own), then beside the batch.
struct Attempt {
  Percentiles alone, mixed;
  // The batch's busy fraction: alone on the test's device (through fracgpu), on a device
  // of its own beside the loop alone, beside the loop.
  double solo_busy = 0, elsewhere_busy = 0, batch_busy = 0;
  Percentiles host_alone, host_mixed;  // HostProbe's lateness during each run
  double load = 0;                     // the highest load average seen
};

// The checks an attempt fails (empty: it passed).
std::vector<std::string> failed_checks(const Attempt& a, const LatencyBound& b,
                                       const std::string& arrivals) {
  std::vector<std::string> failed;
  auto check = [&](const char* what, uint64_t mixed, uint64_t alone, uint64_t wait,
                   uint64_t margin) {
    if (mixed > alone + wait + margin)
      failed.push_back(std::string(what) + " " + std::to_string(mixed) + " > " +
                       std::to_string(alone) + " alone + " + std::to_string(wait) + " wait + " +
                       std::to_string(margin) + " margin");
  };
  if (a.alone.count < kMinRequests || a.mixed.count < kMinRequests)
    failed.push_back("too few requests (" + std::to_string(a.alone.count) + " alone, " +
                     std::to_string(a.mixed.count) + " with the batch)");
  check("p50", a.mixed.p50, a.alone.p50, b.wait_us, LatencyBound::kP50MarginUs);
  check("p90", a.mixed.p90, a.alone.p90, b.wait_us, LatencyBound::kP90MarginUs);
  check("p99", a.mixed.p99, a.alone.p99, b.wait_us, LatencyBound::kP99MarginUs);
  if (b.guarded_regular && arrivals == "regular")
    check("guarded p50", a.mixed.p50, a.alone.p50, 0, LatencyBound::kGuardedP50MarginUs);
  if (a.batch_busy < LatencyBound::kBatchKept * a.solo_busy) {
    std::ostringstream s;
    s << "batch busy " << std::fixed << std::setprecision(3) << a.batch_busy << " < "
      << LatencyBound::kBatchKept << " x " << a.solo_busy << " alone";
    failed.push_back(s.str());
  }
  return failed;
}

std::string describe(const LatencyCase& c, const std::string& arrivals, int attempt,
                     const Attempt& a, const LatencyBound& b,
                     const std::vector<std::string>& failed) {
  std::ostringstream s;
  s << c.name << " " << arrivals << " #" << attempt << ": alone " << a.alone.text()
    << " | with batch " << a.mixed.text() << " us | wait asserted " << b.wait_us << " (promised "
    << b.promised_us << ") | batch busy " << std::fixed << std::setprecision(3) << a.batch_busy
    << " (alone " << a.solo_busy << ", on its own device " << a.elsewhere_busy
    << ") | host late p50/p90/p99 " << a.host_alone.brief() << " alone, " << a.host_mixed.brief()
    << " with batch | load " << std::setprecision(2) << a.load << " | "
    << (failed.empty() ? "ok" : "FAILED:");
  for (const auto& f : failed) s << " [" << f << "]";
  return s.str();
}

class LatencyIsolation : public LatencyFixture, public ::testing::WithParamInterface<LatencyCase> {
 protected:
  void SetUp() override { start(GetParam().mode); }

  uint64_t device_timeslice_us() {
    ProcessResult r = run_process({FRACGPU_FAKECUDA_CTL, "status"}, base_env_);
    const auto doc = nlohmann::json::parse(r.out, nullptr, false);
    return doc.is_discarded() ? 0 : doc.value("timeslice_us", uint64_t{0});
  }
  double solo_busy(uint32_t kernel_us) {
    return with_batch(kernel_us, Place::kBeside,
                      [] { std::this_thread::sleep_for(milliseconds(600)); });
  }
  Attempt measure(uint32_t kernel_us, const std::string& arrivals) {
    Attempt a;
    a.load = load_average();
    a.elsewhere_busy = with_batch(kernel_us, Place::kElsewhere, [&] {
      HostProbe probe;
      a.alone = serve(arrivals, 1.0, arrivals + "-alone");
      a.host_alone = probe.stop();
    });
    a.batch_busy = with_batch(kernel_us, Place::kBeside, [&] {
      HostProbe probe;
      a.mixed = serve(arrivals, 1.2, arrivals + "-mixed");
      a.host_mixed = probe.stop();
    });
    a.load = std::max(a.load, load_average());
    return a;
  }
};

TEST_P(LatencyIsolation, HighRequestsWaitWithinTheBound) {
  const LatencyCase& c = GetParam();
  create_tenants(c.batch_priority);
  ASSERT_FALSE(HasFatalFailure());
  const LatencyBound bound = LatencyBound::of(c, device_timeslice_us());
  ASSERT_GT(bound.wait_us, 0u);
  double solo = solo_busy(c.batch_kernel_us);
  std::vector<std::string> patterns = {"regular", "poisson"};
  if (c.bursts) patterns.push_back("burst");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string unmeasurable;  // patterns whose every failed attempt the host spoilt
  for (const std::string& arrivals : patterns) {
    std::string history;
    bool passed = false, conclusive_failure = false;
    for (int attempt = 1; attempt <= kAttempts && !passed; ++attempt) {
      if (attempt > 1) solo = solo_busy(c.batch_kernel_us);  // the load may have changed
      Attempt a = measure(c.batch_kernel_us, arrivals);
      a.solo_busy = solo;
      const std::vector<std::string> failed = failed_checks(a, bound, arrivals);
      const bool conclusive = a.host_alone.p90 <= kHostLateP90LimitUs &&
                              a.host_mixed.p90 <= kHostLateP90LimitUs &&
                              a.load <= kLoadPerCoreLimit * cores;
      passed = failed.empty();
      conclusive_failure = conclusive_failure || (!passed && conclusive);
      const std::string line = describe(c, arrivals, attempt, a, bound, failed) +
                               (passed || conclusive ? "" : " (host overloaded: not counted)");
      log(arrivals + "_" + std::to_string(attempt), line);
      history += line + "\n";
    }
    if (!passed && conclusive_failure) ADD_FAILURE() << "no attempt passed:\n" << history;
    if (!passed && !conclusive_failure) unmeasurable += history;
  }
  if (!unmeasurable.empty() && !HasFailure())
    GTEST_SKIP() << "the host was overloaded (threads woken more than " << kHostLateP90LimitUs
                 << " us late at p90, or a load average above " << kLoadPerCoreLimit * cores
                 << ") in every attempt that failed:\n"
                 << unmeasurable;
}

// Bursts at 0.2 ms (where time slicing makes every request of a burst wait for the
// device's timeslice anew: the high context's queue runs dry between two of them) and a
// low-priority batch at 2 ms.
const LatencyCase kCases[] = {
    {"TimeSliceBatch50us", Mode::kTimeSlice, 50, "normal", false, true},
    {"TimeSliceBatch200us", Mode::kTimeSlice, 200, "normal", true, true},
    {"TimeSliceBatch1ms", Mode::kTimeSlice, 1000, "normal", false, false, true},
    {"TimeSliceBatch2ms", Mode::kTimeSlice, 2000, "low", false},
    {"MpsBatch50us", Mode::kMps, 50, "normal", false},
    {"MpsBatch200us", Mode::kMps, 200, "normal", true},
    {"MpsBatch1ms", Mode::kMps, 1000, "normal", false},
    {"MpsBatch2ms", Mode::kMps, 2000, "low", false},
};

std::string case_name(const ::testing::TestParamInfo<LatencyCase>& param) {
  return param.param.name;
}

INSTANTIATE_TEST_SUITE_P(Cases, LatencyIsolation, ::testing::ValuesIn(kCases), case_name);

// Not `timing`: every arrival pattern is served beside a 0.2 ms batch and completes, and
// no request waits seconds (a hang, a lost grant: the normal build's worst is 0.12 s, at
// load 5); runs under the sanitizers.
class LatencySmoke : public LatencyFixture {
 protected:
  void serve_every_pattern(Mode mode) {
    start(mode);
    ASSERT_FALSE(HasFatalFailure());
    create_tenants("normal");
    ASSERT_FALSE(HasFatalFailure());
    for (const std::string arrivals : {"regular", "poisson", "burst"}) {
      Percentiles q;
      const double batch_busy =
          with_batch(200, Place::kBeside, [&] { q = serve(arrivals, 0.8, arrivals + "-smoke"); });
      log(arrivals, q.text() + " us beside the batch");
      EXPECT_GE(q.count, 10u) << arrivals;
      EXPECT_LT(q.max, 3'000'000u) << arrivals << ": " << q.text();
      EXPECT_GT(batch_busy, 0.0) << arrivals << ": the batch did not run";
    }
  }
};

TEST_F(LatencySmoke, EveryArrivalPatternIsServedBesideABatchTimeSliced) {
  serve_every_pattern(Mode::kTimeSlice);
}

TEST_F(LatencySmoke, EveryArrivalPatternIsServedBesideABatchInMpsMode) {
  serve_every_pattern(Mode::kMps);
}

// The request client refuses what it does not know, before touching the driver.
TEST_F(LatencySmoke, TheRequestClientRefusesAnUnknownArrivalPattern) {
  start(Mode::kTimeSlice);
  ASSERT_FALSE(HasFatalFailure());
  ProcessResult r =
      run_process({FRACGPU_SPIN_CLIENT, "--think-us", "100", "--arrivals", "often"}, native_env());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--arrivals must be regular, poisson or burst"), std::string::npos) << r.err;
  r = run_process({FRACGPU_SPIN_CLIENT, "--think-us", "100", "--burst-size", "0"}, native_env());
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

}  // namespace
}  // namespace fracgpu::testing::latency