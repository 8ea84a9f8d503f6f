// The process's capture bookkeeping and the relaxed-mode scope (see capture_tracker.h).
#include "core/capture_tracker.h"

#include <new>

namespace fracgpu {

CaptureTracker& CaptureTracker::process() {
  static CaptureTracker* tracker = new CaptureTracker();  // never destroyed: usable during exit
  return *tracker;
}

CaptureTracker::State CaptureTracker::capture_state(CUstream stream) const noexcept {
  if (ops_.stream_is_capturing == nullptr) return State::kUnknown;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (ops_.stream_is_capturing(stream, &status) != CUDA_SUCCESS) return State::kUnknown;
  return status == CU_STREAM_CAPTURE_STATUS_NONE ? State::kNotCapturing : State::kCapturing;
}

bool CaptureTracker::capturing(CUstream stream) const noexcept {
  return capture_state(stream) != State::kNotCapturing;
}

void CaptureTracker::close_one() noexcept {
  uint32_t open = open_.load(std::memory_order_relaxed);
  while (open > 0 && !open_.compare_exchange_weak(open, open - 1, std::memory_order_seq_cst)) {
  }
}

void CaptureTracker::relax_this_thread() const noexcept {
  if (ops_.exchange_mode == nullptr) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ops_.exchange_mode(&mode);
}

CaptureTracker::RelaxedScope::RelaxedScope(const CaptureTracker* tracker) noexcept
    : tracker_(tracker) {
  if (tracker_ == nullptr || tracker_->ops_.exchange_mode == nullptr) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (tracker_->ops_.exchange_mode(&mode) != CUDA_SUCCESS) return;
  previous_ = mode;
  exchanged_ = true;
}

CaptureTracker::RelaxedScope::~RelaxedScope() {
  if (!exchanged_) return;
  CUstreamCaptureMode mode = previous_;
  tracker_->ops_.exchange_mode(&mode);
}

void CaptureTracker::reset_after_fork() noexcept {
  new (&sync_mutex_) std::mutex();  // another thread may have held it at fork
  open_.store(0, std::memory_order_relaxed);
}

}  // namespace fracgpu
