// Events. Recording an event enqueues a marker; when the executor reaches it, the
// event is stamped with CLOCK_MONOTONIC and becomes complete, so cuEventElapsedTime
// measures the time the work between two events took on the simulated device.
// Re-recording starts a new generation: the event is complete only when its latest
// record has been reached.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <vector>

#include "handle_registry.h"
#include "stream_queue.h"

namespace fakecuda {

class CaptureSession;
class Stream;

class Event : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Event;

  explicit Event(unsigned flags) : HandleObject(kKind), flags_(flags) {}

  unsigned flags() const { return flags_; }
  bool timing_disabled() const { return (flags_ & CU_EVENT_DISABLE_TIMING) != 0; }

  // Enqueues the marker on `stream` (not capturing).
  void record(Stream& stream);
  // CUDA_SUCCESS when complete or never recorded, CUDA_ERROR_NOT_READY otherwise.
  CUresult query();
  void synchronize();
  // Completion time of the latest record; false if not recorded or not complete yet.
  bool completed_timestamp(int64_t& ns, bool& ever_recorded);

  // Where the latest record sits: used by cuStreamWaitEvent.
  void last_record(std::shared_ptr<StreamQueue>& queue, uint64_t& sequence);

  // Set while the event was recorded in a capturing stream (fork/join in capture).
  std::shared_ptr<CaptureSession> capture;
  std::vector<CUgraphNode> capture_dependencies;
  std::mutex capture_mutex;

 private:
  void complete(uint64_t generation);

  unsigned flags_;
  std::mutex mutex_;
  std::shared_ptr<StreamQueue> queue_;
  uint64_t sequence_ = 0;
  uint64_t recorded_generation_ = 0;
  uint64_t completed_generation_ = 0;
  int64_t timestamp_ns_ = 0;
};

}  // namespace fakecuda
