// The executor of one context: a FIFO of work items (kernels, async copies and sets,
// event records, host functions, graph launches) drained by one thread, as a GPU's
// hardware queue drains a context's work. All streams of a context feed this one
// queue, which keeps stream order trivially correct; each submission gets a sequence
// number so that "wait for everything submitted to stream S before now" is just
// "wait until the completed sequence reaches S's last sequence".
#pragma once

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "engine_session.h"

namespace fakecuda {

class AllocationRegistry;
class StreamQueue;

// What a work item may use while it executes on the executor thread.
struct WorkScope {
  EngineSession& engine;
  const AllocationRegistry& memory;
  StreamQueue& queue;
};

class StreamQueue {
 public:
  using Work = std::function<void(WorkScope&)>;

  StreamQueue(SegmentLayout* layout, uint32_t device, ProcessRecord* process, EngineParty self,
              const AllocationRegistry& memory, MpsClient* mps = nullptr);
  ~StreamQueue();
  StreamQueue(const StreamQueue&) = delete;
  StreamQueue& operator=(const StreamQueue&) = delete;

  // Appends work; returns its sequence number (> 0).
  uint64_t enqueue(Work work);
  bool completed(uint64_t sequence) const;
  void wait_until_completed(uint64_t sequence);
  uint64_t last_enqueued() const;
  void drain() { wait_until_completed(last_enqueued()); }
  // Finishes the queued work and stops the executor thread (idempotent).
  void shutdown();

  // First asynchronous error of this context (CUDA_SUCCESS while healthy). Like the
  // real driver's sticky errors, it is reported by every later synchronisation. An MPS
  // client also gets the fatal faults of the other clients of its server on this device.
  CUresult sticky_error() const {
    if (sticky_error_.load() == CUDA_SUCCESS && engine_.mps_fault_reached())
      adopt_error(CUDA_ERROR_ILLEGAL_ADDRESS);
    return sticky_error_.load();
  }
  void fail(CUresult error);

 private:
  void run();
  bool next_work(Work& work, uint64_t& sequence);
  bool adopt_error(CUresult error) const;

  EngineSession engine_;
  const AllocationRegistry& memory_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable progress_;
  std::deque<std::pair<uint64_t, Work>> items_;
  uint64_t next_sequence_ = 1;
  uint64_t completed_sequence_ = 0;
  bool stopping_ = false;
  mutable std::atomic<CUresult> sticky_error_{CUDA_SUCCESS};
  std::thread worker_;
};

}  // namespace fakecuda
