// Timeslice bookkeeping around the device engine (see engine_session.h).
#include "engine_session.h"

#include <algorithm>

#include "precise_clock.h"

namespace fakecuda {

EngineSession::EngineSession(SegmentLayout* layout, uint32_t device, ProcessRecord* process,
                             EngineParty self, MpsClient* mps)
    : engine_(&layout->engines[device], self),
      mps_(mps),
      self_(self),
      engine_record_(&layout->engines[device]),
      device_(&layout->devices[device]),
      process_(process),
      device_index_(device),
      timeslice_ns_(static_cast<int64_t>(layout->timeslice_us) * 1000) {}

int64_t EngineSession::now() {
  return monotonic_ns();
}

void EngineSession::start_holding() {
  if (holding_ && !engine_.owns()) holding_ = false;  // taken away while we were stopped
  if (!holding_) {
    engine_.acquire();
    holding_ = true;
    slice_start_ns_ = now();
    return;
  }
  yield_if_slice_over();
}

void EngineSession::yield_if_slice_over() {
  if (now() - slice_start_ns_ < timeslice_ns_) return;
  if (engine_.others_waiting()) engine_.yield_to_waiters();
  // Either we yielded and got the engine back, or nobody wanted it: a new slice starts.
  slice_start_ns_ = now();
}

void EngineSession::occupy(int64_t duration_ns) {
  if (mps_ != nullptr) {
    if (!mps_->occupy(device_index_, self_.executor_id, demand_, duration_ns))
      mps_failure_ = CUDA_ERROR_MPS_CONNECTION_FAILED;
    return;
  }
  int64_t remaining = duration_ns;
  while (remaining > 0) {
    start_holding();
    int64_t begin = now();
    int64_t chunk_end = std::min(begin + remaining, slice_start_ns_ + timeslice_ns_);
    enter_chunk();
    sleep_until_precise(chunk_end);
    if (!engine_.owns()) {  // stopped mid-chunk and the engine went on: run the chunk again
      holding_ = false;     // (the takeover reset running_chunks)
      continue;
    }
    leave_chunk();
    int64_t held = now() - begin;
    charge_busy(held);
    remaining -= held;
  }
}

void EngineSession::charge_busy(int64_t ns) {
  if (ns <= 0) return;
  process_->busy_ns[device_index_].fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  device_->busy_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

void EngineSession::enter_chunk() {
  if (engine_record_->running_chunks.fetch_add(1) != 0)
    engine_record_->overlap_violations.fetch_add(1);
}

void EngineSession::leave_chunk() {
  engine_record_->running_chunks.fetch_sub(1);
}

void EngineSession::count_kernel() {
  process_->kernels[device_index_].fetch_add(1, std::memory_order_relaxed);
  device_->kernels_executed.fetch_add(1, std::memory_order_relaxed);
}

void EngineSession::release() {
  if (mps_ != nullptr || !holding_) return;
  engine_.release();
  holding_ = false;
}

}  // namespace fakecuda
