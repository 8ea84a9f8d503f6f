// Streams. A stream is an ordered lane of work in its context's executor queue; all
// streams of a context share that queue (allowed: it only makes execution more
// serial), and each remembers the sequence number of its last submission so that
// cuStreamSynchronize waits for exactly what was submitted to it. A stream also
// carries its stream-capture state: while capturing, submissions become graph nodes.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <vector>

#include "handle_registry.h"
#include "stream_queue.h"

namespace fakecuda {

class CaptureSession;

class Stream : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Stream;

  Stream(std::shared_ptr<StreamQueue> queue, CUcontext context, uint32_t device, unsigned flags,
         int priority, uint64_t id);

  CUstream handle() { return reinterpret_cast<CUstream>(this); }
  CUcontext context() const { return context_; }
  uint32_t device() const { return device_; }
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  uint64_t id() const { return id_; }
  StreamQueue& queue() { return *queue_; }
  const std::shared_ptr<StreamQueue>& shared_queue() { return queue_; }

  // Enqueues work on the context's executor; returns its sequence number.
  uint64_t submit(StreamQueue::Work work);
  uint64_t last_sequence() const;
  bool idle() const { return queue_->completed(last_sequence()); }
  void wait_idle() { queue_->wait_until_completed(last_sequence()); }

  // Capture state (guarded by capture_mutex).
  std::mutex capture_mutex;
  std::shared_ptr<CaptureSession> capture;
  std::vector<CUgraphNode> capture_dependencies;
  bool capture_origin = false;  // began the capture (only the origin may end it)

 private:
  std::shared_ptr<StreamQueue> queue_;
  CUcontext context_;
  uint32_t device_;
  unsigned flags_;
  int priority_;
  uint64_t id_;
  mutable std::mutex mutex_;
  uint64_t last_sequence_ = 0;
};

// Resolves a CUstream: NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD mean the
// current context's default stream.
CUresult resolve_stream(CUstream handle, std::shared_ptr<Stream>& out);

// True if `handle` names the default stream of some context (capture is refused there).
bool is_default_stream_handle(CUstream handle);

// The handle a _ptsz/_ptds entry point means: NULL there is the per-thread default
// stream, not the legacy one (the capture rules tell them apart).
inline CUstream per_thread_handle(CUstream handle) {
  return handle == nullptr ? CU_STREAM_PER_THREAD : handle;
}

}  // namespace fakecuda
