// InflightLimiter: bounds the GPU time one process keeps queued on one GPU, so that a
// slice handoff drains quickly and a high-priority tenant never waits behind a deep
// queue of a lower class. The bound is in GPU time, not in kernels: the limiter
// records a fence event after every Nth launch, learns the GPU time per launch from
// the elapsed time between consecutive completed fences, and before letting a launch
// return makes the thread wait on the oldest fence while (launches not known to be
// complete) x (time per launch) exceeds the limit. N is chosen so that a fence covers
// about a quarter of the limit, so a stream of tiny kernels records one event per
// thousands of launches (the calibration measured +0.5 us per recorded event).
// Fast path (every launch): one relaxed fetch_add and one relaxed load.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "core/capture_tracker.h"
#include "core/driver_calls.h"

namespace fracgpu {

// The driver calls it makes are FenceOps (core/driver_calls.h): any null entry disables it.
class InflightLimiter {
 public:
  // `captures` tells whether a capture is open: fence calls then run in relaxed
  // capture mode, and never on a capturing stream (capture_tracker.h).
  void init(const FenceOps* ops, const CaptureTracker* captures) {
    ops_ = ops->complete() ? ops : nullptr;
    captures_ = captures;
  }

  // After a launch that was submitted to `stream` (already the explicit per-thread or
  // legacy handle). `limit_us` = 0 means unbounded (fences then only keep the estimate fresh).
  void after_launch(CUstream stream, uint32_t limit_us) noexcept {
    const uint64_t n = launches_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n < next_fence_at_.load(std::memory_order_relaxed)) return;
    slow_path(stream, limit_us, n);
  }
  // The limit changed: fence at the next launch so the new bound applies at once.
  void limit_changed() noexcept { next_fence_at_.store(0, std::memory_order_relaxed); }
  // The drainer could not synchronise the context (a capture is open): waits for the
  // fences recorded so far instead, which bounds what is still queued.
  void wait_for_recorded() noexcept;
  // The context is being destroyed: its events go with it.
  void forget_context(CUcontext ctx) noexcept;
  // After fork(): the child starts empty (the parent's events are not the child's).
  void reset_after_fork() noexcept;

  double us_per_launch() const noexcept { return us_per_launch_.load(std::memory_order_relaxed); }
  uint64_t launches() const noexcept { return launches_.load(std::memory_order_relaxed); }

  static constexpr uint64_t kIdleFenceInterval = 4096;  // launches per fence when unbounded
  static constexpr uint64_t kMaxFenceInterval = 65536;

 private:
  struct Fence {
    CUevent event = nullptr;
    CUcontext ctx = nullptr;
    uint64_t launch = 0;  // launches_ when it was recorded
  };

  enum class Record { kRecorded, kSkipped, kCapturing };
  void slow_path(CUstream stream, uint32_t limit_us, uint64_t n) noexcept;
  Record record_fence(CUstream stream, uint64_t n) noexcept;
  void reap() noexcept;
  void learn(const Fence& earlier, const Fence& later) noexcept;
  void wait_until_within(uint32_t limit_us, uint64_t n) noexcept;
  uint64_t fence_interval(uint32_t limit_us) const noexcept;
  CUevent take_event(CUcontext ctx) noexcept;
  void give_back(const Fence& fence) noexcept;

  const FenceOps* ops_ = nullptr;
  const CaptureTracker* captures_ = nullptr;
  std::atomic<uint64_t> launches_{0};
  std::atomic<uint64_t> next_fence_at_{0};
  std::mutex mutex_;  // below: slow path only
  std::deque<Fence> pending_;
  Fence last_done_;           // newest fence known complete (event kept for the next elapsed time)
  std::vector<Fence> spare_;  // recycled events, by context
  std::atomic<double> us_per_launch_{0};  // 0 = not learned yet (read without the mutex)
};

}  // namespace fracgpu
