// Event recording and completion (see event.h).
#include "event.h"

#include "precise_clock.h"
#include "stream.h"

namespace fakecuda {

void Event::record(Stream& stream) {
  std::shared_ptr<Event> self = std::static_pointer_cast<Event>(shared_from_this());
  {
    std::lock_guard capture_lock(capture_mutex);
    capture.reset();  // a plain record ends any capture-time meaning of this event
    capture_dependencies.clear();
  }
  std::lock_guard lock(mutex_);
  uint64_t generation = ++recorded_generation_;
  queue_ = stream.shared_queue();
  sequence_ = stream.submit([self, generation](WorkScope&) { self->complete(generation); });
}

void Event::complete(uint64_t generation) {
  int64_t now = monotonic_ns();
  std::lock_guard lock(mutex_);
  if (generation <= completed_generation_) return;
  completed_generation_ = generation;
  timestamp_ns_ = now;
}

CUresult Event::query() {
  std::lock_guard lock(mutex_);
  return completed_generation_ >= recorded_generation_ ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

void Event::synchronize() {
  std::shared_ptr<StreamQueue> queue;
  uint64_t sequence = 0;
  last_record(queue, sequence);
  if (queue) queue->wait_until_completed(sequence);
}

bool Event::completed_timestamp(int64_t& ns, bool& ever_recorded) {
  std::lock_guard lock(mutex_);
  ever_recorded = recorded_generation_ != 0;
  if (!ever_recorded || completed_generation_ < recorded_generation_) return false;
  ns = timestamp_ns_;
  return true;
}

void Event::last_record(std::shared_ptr<StreamQueue>& queue, uint64_t& sequence) {
  std::lock_guard lock(mutex_);
  queue = queue_;
  sequence = sequence_;
}

}  // namespace fakecuda
