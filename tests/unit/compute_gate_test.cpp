// The shim's compute gate and in-flight limiter (interpose/core), driven directly:
// a granted word passes without touching shared memory; a revoked one blocks until
// granted (futex), counts the thread as waiting in its slot, passes captured launches
// and passes at once when the broker is gone; the limiter learns GPU time per launch from
// fence events and holds a launching thread while more than its bound is queued.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>

#include "core/grant_gate.h"
#include "core/inflight_limiter.h"
#include "fracgpu/futex_word.h"
#include "gate_fixture.h"

namespace fracgpu {
namespace {

TEST_F(GateFixture, GrantedWordIsAcknowledgedOnceThenFast) {
  publish(5, true);
  EXPECT_FALSE(gate.unchanged());
  bool new_epoch = false;
  gate.pass_slow(nullptr, nullptr, &new_epoch);
  EXPECT_TRUE(new_epoch);
  EXPECT_TRUE(gate.unchanged());
  EXPECT_EQ(ledger->schedule[3][0].launched_epoch.load(), 5u);
  EXPECT_EQ(rings(), 0);  // no notify bit: nobody is told
}

TEST_F(GateFixture, NotifyBitRingsTheDoorbell) {
  quota->devices[0].grant_word.store(make_grant_word(6, true, true));
  bool new_epoch = false;
  gate.pass_slow(nullptr, nullptr, &new_epoch);
  EXPECT_EQ(rings(), 1);
}

TEST_F(GateFixture, RevokedGateWaitsForTheGrantAndCountsTheWaiter) {
  publish(7, false);
  std::atomic<bool> passed{false};
  std::thread launcher([&] {
    bool new_epoch = false;
    gate.pass_slow(nullptr, nullptr, &new_epoch);
    passed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(passed.load());
  EXPECT_EQ(ledger->schedule[3][0].waiting.load(), 1u);
  EXPECT_GE(rings(), 1);
  publish(8, true);
  launcher.join();
  EXPECT_TRUE(passed.load());
  EXPECT_EQ(ledger->schedule[3][0].waiting.load(), 0u);
  EXPECT_EQ(ledger->schedule[3][0].launched_epoch.load(), 8u);
}

TEST_F(GateFixture, CapturedLaunchesAreNeverGated) {
  publish(9, false);
  bool new_epoch = false;
  gate.pass_slow([](void*) noexcept { return true; }, nullptr, &new_epoch);  // returns at once
  EXPECT_EQ(ledger->schedule[3][0].waiting.load(), 0u);
}

TEST_F(GateFixture, BrokerGoneLetsLaunchesPassAndSaysSo) {
  ::close(bell_fd);
  ::unlink(bell_path.c_str());
  bell_fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  publish(11, false);
  const auto start = std::chrono::steady_clock::now();
  bool new_epoch = false;
  gate.pass_slow(nullptr, nullptr, &new_epoch);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_LT(waited, std::chrono::milliseconds(100));  // the doorbell refuses: no wait at all
  EXPECT_TRUE(gate.unchanged());  // later launches pass until a broker publishes again
}

TEST_F(GateFixture, DrainReportStoresTheEpochAndRings) {
  gate.report_drained(12);
  EXPECT_EQ(ledger->schedule[3][0].drained_epoch.load(), 12u);
  EXPECT_EQ(rings(), 1);
}

// A simulated stream: fences complete in order, each `us_per_launch` of GPU time per
// launch after the previous one; event_synchronize completes the oldest.
struct FakeGpu {
  static inline std::deque<std::pair<CUevent, uint64_t>> recorded;  // (event, launch count)
  static inline uint64_t completed_upto = 0;                        // launches finished
  static inline uint64_t launches = 0;
  static inline int syncs = 0;
  static inline int queries = 0;
  static inline std::size_t records = 0;
  static inline bool capturing = false;
  static inline uintptr_t next = 0x10;
  static void reset() {
    recorded.clear();
    completed_upto = launches = 0;
    syncs = 0;
    queries = 0;
    records = 0;
    capturing = false;
  }
  static uint64_t launch_of(CUevent e) {
    for (auto& [ev, n] : recorded)
      if (ev == e) return n;
    return 0;
  }
};

FenceOps fake_ops() {
  FenceOps o;
  o.ctx_get_current = [](CUcontext* c) {
    *c = reinterpret_cast<CUcontext>(0x1);
    return CUDA_SUCCESS;
  };
  o.event_create = [](CUevent* e, unsigned) {
    *e = reinterpret_cast<CUevent>(FakeGpu::next++);
    return CUDA_SUCCESS;
  };
  o.event_record = [](CUevent e, CUstream) {  // re-recording an event moves it (as in CUDA)
    std::erase_if(FakeGpu::recorded, [e](const auto& r) { return r.first == e; });
    FakeGpu::recorded.emplace_back(e, FakeGpu::launches);
    ++FakeGpu::records;
    return CUDA_SUCCESS;
  };
  o.event_query = [](CUevent e) {
    ++FakeGpu::queries;
    return FakeGpu::launch_of(e) <= FakeGpu::completed_upto ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  };
  o.event_synchronize = [](CUevent e) {
    ++FakeGpu::syncs;
    FakeGpu::completed_upto = std::max(FakeGpu::completed_upto, FakeGpu::launch_of(e));
    return CUDA_SUCCESS;
  };
  o.event_elapsed = [](float* ms, CUevent a, CUevent b) {
    *ms = static_cast<float>(FakeGpu::launch_of(b) - FakeGpu::launch_of(a)) *
          1.0f;  // 1 ms per launch
    return CUDA_SUCCESS;
  };
  o.event_destroy = [](CUevent) { return CUDA_SUCCESS; };
  o.stream_is_capturing = [](CUstream, CUstreamCaptureStatus* s) {
    *s = FakeGpu::capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  };
  return o;
}

TEST(InflightLimiter, LearnsGpuTimePerLaunchAndBoundsTheQueue) {
  FakeGpu::reset();
  static const FenceOps ops = fake_ops();
  InflightLimiter limiter;
  limiter.init(&ops, nullptr);
  for (int i = 0; i < 50; ++i) {
    ++FakeGpu::launches;
    limiter.after_launch(nullptr, 3000);  // 3 ms bound, 1 ms launches
    // Never more than the bound (plus the launch just made) queued after a return.
    EXPECT_LE(FakeGpu::launches - FakeGpu::completed_upto, 4u) << "launch " << i;
  }
  EXPECT_NEAR(limiter.us_per_launch(), 1000.0, 1.0);
  EXPECT_GT(FakeGpu::syncs, 0);
}

TEST(InflightLimiter, UnboundedFencesRarelyAndNeverWaits) {
  FakeGpu::reset();
  static const FenceOps ops = fake_ops();
  InflightLimiter limiter;
  limiter.init(&ops, nullptr);
  for (int i = 0; i < 5; ++i) {  // learn first
    ++FakeGpu::launches;
    FakeGpu::completed_upto = FakeGpu::launches;
    limiter.after_launch(nullptr, 0);
  }
  const std::size_t fences = FakeGpu::records;
  for (int i = 0; i < 10000; ++i) {
    ++FakeGpu::launches;
    limiter.after_launch(nullptr, 0);
  }
  EXPECT_LE(FakeGpu::records - fences, 10000 / InflightLimiter::kIdleFenceInterval + 1);
  EXPECT_EQ(FakeGpu::syncs, 0);
}

TEST(InflightLimiter, NeverRecordsIntoACapturingStream) {
  FakeGpu::reset();
  FakeGpu::capturing = true;
  static const FenceOps ops = fake_ops();
  InflightLimiter limiter;
  limiter.init(&ops, nullptr);
  for (int i = 0; i < 100; ++i) {
    ++FakeGpu::launches;
    limiter.after_launch(nullptr, 500);
  }
  EXPECT_EQ(FakeGpu::records, 0u);
  EXPECT_EQ(FakeGpu::syncs, 0);
}

// Inside the application's own capture, an event query is an unsafe call that would
// invalidate it: a launch into a capturing stream must touch no event at all, even with
// fences of earlier, uncaptured launches still pending (graphConditionalNodes on the H200).
TEST(InflightLimiter, TouchesNoEventWhileTheLaunchingStreamCaptures) {
  FakeGpu::reset();
  static const FenceOps ops = fake_ops();
  InflightLimiter limiter;
  limiter.init(&ops, nullptr);
  for (int i = 0; i < 3; ++i) {  // uncaptured launches leave fences pending
    ++FakeGpu::launches;
    limiter.after_launch(nullptr, 500'000);
  }
  ASSERT_GT(FakeGpu::records, 0u);
  const int queries = FakeGpu::queries, syncs = FakeGpu::syncs;
  const std::size_t records = FakeGpu::records;
  FakeGpu::capturing = true;
  for (int i = 0; i < 100; ++i) limiter.after_launch(nullptr, 500);
  EXPECT_EQ(FakeGpu::queries, queries);
  EXPECT_EQ(FakeGpu::syncs, syncs);
  EXPECT_EQ(FakeGpu::records, records);
  FakeGpu::capturing = false;  // the next uncaptured launch fences again at once
  limiter.after_launch(nullptr, 500);
  EXPECT_GT(FakeGpu::records, records);
}

// The drainer's fallback while a capture is open: wait for the fences recorded so far.
TEST(InflightLimiter, WaitForRecordedCompletesEveryPendingFence) {
  FakeGpu::reset();
  static const FenceOps ops = fake_ops();
  InflightLimiter limiter;
  limiter.init(&ops, nullptr);
  for (int i = 0; i < 4; ++i) {
    ++FakeGpu::launches;
    limiter.after_launch(nullptr, 500'000);
  }
  limiter.wait_for_recorded();
  EXPECT_EQ(FakeGpu::completed_upto, FakeGpu::recorded.back().second);
}

TEST(InflightLimiter, MissingDriverCallsDisableIt) {
  FenceOps none;
  InflightLimiter limiter;
  limiter.init(&none, nullptr);
  for (int i = 0; i < 10; ++i) limiter.after_launch(nullptr, 500);  // no crash, no calls
  EXPECT_EQ(limiter.launches(), 10u);
}

}  // namespace
}  // namespace fracgpu
