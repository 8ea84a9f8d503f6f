// Executor thread of a context (see stream_queue.h). The thread holds the device engine
// across consecutive items and gives it back whenever its queue runs dry, so an idle
// context never blocks the device for others.
#include "stream_queue.h"

#include <pthread.h>
#include <signal.h>

#include "precise_clock.h"

namespace fakecuda {

StreamQueue::StreamQueue(SegmentLayout* layout, uint32_t device, ProcessRecord* process,
                         EngineParty self, const AllocationRegistry& memory, MpsClient* mps)
    : engine_(layout, device, process, self, mps), memory_(memory) {
  // Block all signals while spawning so the executor never runs application handlers.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  worker_ = std::thread([this] { run(); });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

StreamQueue::~StreamQueue() {
  shutdown();
}

void StreamQueue::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  if (!worker_.joinable()) return;
  // The last reference may be dropped by a work item on the executor itself.
  if (worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();
  } else {
    worker_.join();
  }
}

uint64_t StreamQueue::enqueue(Work work) {
  uint64_t sequence;
  {
    std::lock_guard lock(mutex_);
    sequence = next_sequence_++;
    items_.emplace_back(sequence, std::move(work));
  }
  work_ready_.notify_one();
  return sequence;
}

bool StreamQueue::completed(uint64_t sequence) const {
  std::lock_guard lock(mutex_);
  return completed_sequence_ >= sequence;
}

void StreamQueue::wait_until_completed(uint64_t sequence) {
  std::unique_lock lock(mutex_);
  progress_.wait(lock, [&] { return completed_sequence_ >= sequence; });
}

uint64_t StreamQueue::last_enqueued() const {
  std::lock_guard lock(mutex_);
  return next_sequence_ - 1;
}

bool StreamQueue::adopt_error(CUresult error) const {
  CUresult expected = CUDA_SUCCESS;
  return sticky_error_.compare_exchange_strong(expected, error);
}

// A fatal fault of an MPS client is a fault of its server on this device: every client
// of the server gets it (mps_state.h).
void StreamQueue::fail(CUresult error) {
  if (adopt_error(error) && error == CUDA_ERROR_ILLEGAL_ADDRESS && !engine_.mps_fault_reached())
    engine_.report_mps_fault();
}

bool StreamQueue::next_work(Work& work, uint64_t& sequence) {
  std::unique_lock lock(mutex_);
  while (items_.empty()) {
    if (stopping_) return false;
    lock.unlock();
    engine_.release();  // queue ran dry: let other contexts use the device
    lock.lock();
    if (!items_.empty() || stopping_) continue;
    work_ready_.wait(lock, [&] { return !items_.empty() || stopping_; });
  }
  sequence = items_.front().first;
  work = std::move(items_.front().second);
  items_.pop_front();
  return true;
}

void StreamQueue::run() {
  pthread_setname_np(pthread_self(), "fakecuda-exec");
  use_tight_timer_slack();
  WorkScope scope{engine_, memory_, *this};
  Work work;
  uint64_t sequence = 0;
  while (next_work(work, sequence)) {
    try {
      work(scope);
    } catch (...) {
      fail(CUDA_ERROR_UNKNOWN);  // never let an exception end the executor thread
    }
    if (const CUresult lost = engine_.take_mps_failure(); lost != CUDA_SUCCESS) fail(lost);
    if (engine_.mps_fault_reached()) adopt_error(CUDA_ERROR_ILLEGAL_ADDRESS);
    work = nullptr;  // drop captured resources before reporting completion
    {
      std::lock_guard lock(mutex_);
      completed_sequence_ = sequence;
    }
    progress_.notify_all();
  }
  engine_.release();
}

}  // namespace fakecuda
