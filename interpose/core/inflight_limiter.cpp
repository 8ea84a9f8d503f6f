// Fence bookkeeping of the in-flight bound (see inflight_limiter.h). Everything here
// runs under the mutex, only on every Nth launch or when the bound is exceeded.
#include "core/inflight_limiter.h"

#include <algorithm>

namespace fracgpu {
namespace {

constexpr double kLearnWeight = 0.25;     // EWMA weight of a new per-launch sample
constexpr std::size_t kMaxPending = 256;  // fences in flight before the oldest is waited for

}  // namespace

uint64_t InflightLimiter::fence_interval(uint32_t limit_us) const noexcept {
  const double per_launch = us_per_launch();
  if (limit_us == 0) return per_launch > 0 ? kIdleFenceInterval : 1;
  if (per_launch <= 0) return 1;
  const double per_fence = static_cast<double>(limit_us) / 4.0;
  return std::clamp<uint64_t>(static_cast<uint64_t>(per_fence / per_launch), 1, kMaxFenceInterval);
}

CUevent InflightLimiter::take_event(CUcontext ctx) noexcept {
  for (std::size_t i = 0; i < spare_.size(); ++i) {
    if (spare_[i].ctx != ctx) continue;
    CUevent event = spare_[i].event;
    spare_[i] = spare_.back();
    spare_.pop_back();
    return event;
  }
  CUevent event = nullptr;
  if (ops_->event_create(&event, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return nullptr;
  return event;
}

void InflightLimiter::give_back(const Fence& fence) noexcept {
  if (fence.event == nullptr) return;
  if (spare_.size() < 64) {
    spare_.push_back(fence);
  } else {
    ops_->event_destroy(fence.event);
  }
}

InflightLimiter::Record InflightLimiter::record_fence(CUstream stream, uint64_t n) noexcept {
  CUcontext ctx = nullptr;
  if (ops_->ctx_get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return Record::kSkipped;
  // Never add an event node to a graph being captured, nor touch a stream whose
  // capture state cannot be read (an implicit-capture error would invalidate it).
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (ops_->stream_is_capturing(stream, &capture) != CUDA_SUCCESS ||
      capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return Record::kCapturing;
  CUevent event = take_event(ctx);
  if (event == nullptr) return Record::kSkipped;
  if (ops_->event_record(event, stream) != CUDA_SUCCESS) {
    ops_->event_destroy(event);
    return Record::kSkipped;
  }
  pending_.push_back(Fence{event, ctx, n});
  return Record::kRecorded;
}

// GPU time per launch from two completed fences of one context: elapsed / launches.
void InflightLimiter::learn(const Fence& earlier, const Fence& later) noexcept {
  if (earlier.event == nullptr || earlier.ctx != later.ctx || later.launch <= earlier.launch)
    return;
  float ms = 0;
  if (ops_->event_elapsed(&ms, earlier.event, later.event) != CUDA_SUCCESS || ms < 0) return;
  const double sample =
      static_cast<double>(ms) * 1000.0 / static_cast<double>(later.launch - earlier.launch);
  const double old = us_per_launch_.load(std::memory_order_relaxed);
  us_per_launch_.store(old <= 0 ? sample : old + kLearnWeight * (sample - old),
                       std::memory_order_relaxed);
}

void InflightLimiter::reap() noexcept {
  while (!pending_.empty()) {
    const CUresult state = ops_->event_query(pending_.front().event);
    if (state == CUDA_ERROR_NOT_READY) return;
    Fence done = pending_.front();
    pending_.pop_front();
    if (state != CUDA_SUCCESS)
      continue;  // a failed or reset context: forget (never destroy) the handle
    learn(last_done_, done);
    give_back(last_done_);
    last_done_ = done;
  }
}

// Waits on the oldest fences while the estimated queued GPU time exceeds the limit.
// Launches after the newest completed fence count as queued; with no estimate yet,
// at most two fences stay pending.
void InflightLimiter::wait_until_within(uint32_t limit_us, uint64_t n) noexcept {
  for (;;) {
    reap();
    if (pending_.empty()) return;
    const uint64_t queued = n - std::min(n, last_done_.launch);
    const double per_launch = us_per_launch();
    const bool over =
        per_launch > 0 ? static_cast<double>(queued) * per_launch > limit_us : pending_.size() > 2;
    if (!over && pending_.size() < kMaxPending) return;
    if (ops_->event_synchronize(pending_.front().event) != CUDA_SUCCESS) pending_.pop_front();
  }
}

void InflightLimiter::slow_path(CUstream stream, uint32_t limit_us, uint64_t n) noexcept {
  if (ops_ == nullptr) {
    next_fence_at_.store(UINT64_MAX, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // Event queries and waits are "potentially unsafe" while a capture is open anywhere
  // in the process: make them in relaxed mode (they never touch captured work).
  CaptureTracker::RelaxedScope relaxed(captures_);
  const Record recorded = record_fence(stream, n);
  // A launch into a capture did not run: touch no event on its behalf (its thread may be
  // the capturing one), and fence at the next launch instead.
  if (recorded == Record::kCapturing) return;
  if (limit_us > 0 && recorded == Record::kRecorded) {
    wait_until_within(limit_us, n);
  } else {
    reap();
    while (pending_.size() >= kMaxPending) wait_until_within(UINT32_MAX, n);
  }
  next_fence_at_.store(n + fence_interval(limit_us), std::memory_order_relaxed);
}

void InflightLimiter::wait_for_recorded() noexcept {
  if (ops_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  CaptureTracker::RelaxedScope relaxed(captures_);
  for (const Fence& fence : pending_)
    ops_->event_synchronize(fence.event);  // never captured events
  reap();
}

void InflightLimiter::forget_context(CUcontext ctx) noexcept {
  if (ops_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto gone = [ctx](const Fence& f) { return f.ctx == ctx; };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), gone), pending_.end());
  spare_.erase(std::remove_if(spare_.begin(), spare_.end(), gone), spare_.end());
  if (last_done_.ctx == ctx) last_done_ = Fence{};
}

void InflightLimiter::reset_after_fork() noexcept {
  new (&mutex_) std::mutex();  // another thread may have held it at fork
  pending_.clear();
  spare_.clear();
  last_done_ = Fence{};
  next_fence_at_.store(0, std::memory_order_relaxed);
}

}  // namespace fracgpu
