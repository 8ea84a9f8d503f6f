// CaptureTracker (interpose/core/capture_tracker.h): the count of open captures, the
// relaxed-mode scope, and the drainer's exclusion of context synchronisation while a
// capture is open, over a fake driver.
#include "core/capture_tracker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace fracgpu {
namespace {

// The fake driver: one stream whose capture status the test sets, and the calling
// thread's interaction mode.
struct FakeCapture {
  static inline std::atomic<bool> capturing{false};
  static inline std::atomic<bool> query_fails{false};
  static inline thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  static inline std::atomic<int> exchanges{0};
  static void reset() {
    capturing = false;
    query_fails = false;
    mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    exchanges = 0;
  }
};

CaptureOps fake_ops() {
  CaptureOps o;
  o.exchange_mode = [](CUstreamCaptureMode* m) {
    std::swap(*m, FakeCapture::mode);
    ++FakeCapture::exchanges;
    return CUDA_SUCCESS;
  };
  o.stream_is_capturing = [](CUstream, CUstreamCaptureStatus* s) {
    if (FakeCapture::query_fails) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *s = FakeCapture::capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  };
  return o;
}

CUresult begin_ok() {
  FakeCapture::capturing = true;
  return CUDA_SUCCESS;
}
CUresult end_ok() {
  FakeCapture::capturing = false;
  return CUDA_SUCCESS;
}

TEST(CaptureTracker, CountsASequenceFromBeginToEnd) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  EXPECT_FALSE(t.any_open());
  EXPECT_EQ(t.begin(begin_ok), CUDA_SUCCESS);
  EXPECT_TRUE(t.any_open());
  EXPECT_EQ(t.end(nullptr, end_ok), CUDA_SUCCESS);
  EXPECT_FALSE(t.any_open());
}

TEST(CaptureTracker, AFailedBeginLeavesNothingOpen) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  EXPECT_EQ(t.begin([] { return CUDA_ERROR_ILLEGAL_STATE; }), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_FALSE(t.any_open());
}

TEST(CaptureTracker, AnEndThatLeavesTheStreamCapturingKeepsTheSequenceOpen) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  t.begin(begin_ok);
  // cuStreamEndCapture on a joined (non-origin) stream: CUDA_ERROR_STREAM_CAPTURE_UNMATCHED.
  EXPECT_EQ(t.end(nullptr, [] { return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; }),
            CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  EXPECT_TRUE(t.any_open());
  // An end on a stream that was not capturing at all closes nothing.
  FakeCapture::capturing = false;
  t.begin(begin_ok);
  EXPECT_EQ(t.open_count(), 2u);
  FakeCapture::capturing = false;
  t.end(nullptr, [] { return CUDA_ERROR_ILLEGAL_STATE; });
  EXPECT_EQ(t.open_count(), 2u);
}

TEST(CaptureTracker, UnknownCaptureStateCountsAsCapturingForFencesOnly) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  FakeCapture::query_fails = true;  // the legacy stream while a blocking stream captures
  EXPECT_TRUE(t.capturing(nullptr));
  EXPECT_FALSE(t.surely_capturing(nullptr));
}

// Always switched: a capture that another thread begins while the scope waits on a fence
// must not be invalidated by the query that follows (seen in the integration test).
TEST(CaptureTracker, RelaxedScopeSwitchesAndRestoresEvenWithNoCaptureOpen) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  {
    CaptureTracker::RelaxedScope scope(&t);
    EXPECT_EQ(FakeCapture::mode, CU_STREAM_CAPTURE_MODE_RELAXED);
    t.begin(begin_ok);  // a capture begins meanwhile: the scope still covers the calls
    EXPECT_EQ(FakeCapture::mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  }
  EXPECT_EQ(FakeCapture::mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  FakeCapture::mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  {
    CaptureTracker::RelaxedScope scope(&t);
    EXPECT_EQ(FakeCapture::mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  }
  EXPECT_EQ(FakeCapture::mode, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  CaptureTracker::RelaxedScope none(nullptr);  // a limiter without a tracker
}

TEST(CaptureTracker, NoContextSyncWhileOpenAndNoBeginDuringASync) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  t.begin(begin_ok);
  bool ran = false;
  EXPECT_FALSE(t.run_unless_capturing([&] { ran = true; }));
  EXPECT_FALSE(ran);
  t.end(nullptr, end_ok);
  // A begin racing a running synchronisation waits for it to finish.
  std::atomic<bool> syncing{false}, synced{false}, begun_before_sync_ended{false};
  std::thread drainer([&] {
    t.run_unless_capturing([&] {
      syncing = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      synced = true;
    });
  });
  while (!syncing) std::this_thread::yield();
  t.begin([&] {
    begun_before_sync_ended = !synced.load();
    return begin_ok();
  });
  drainer.join();
  EXPECT_FALSE(begun_before_sync_ended.load());
  EXPECT_TRUE(t.any_open());
}

TEST(CaptureTracker, RelaxThisThreadSetsRelaxedMode) {
  FakeCapture::reset();
  CaptureTracker t;
  t.init(fake_ops());
  std::thread([&] {
    t.relax_this_thread();
    EXPECT_EQ(FakeCapture::mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  }).join();
}

}  // namespace
}  // namespace fracgpu
