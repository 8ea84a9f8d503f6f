// CaptureTracker: what the shim must know to never break an application's stream
// capture. CUDA forbids "potentially unsafe" calls (event queries and synchronisation,
// context synchronisation, synchronous allocation...) in every thread of a process while
// a capture begun in global mode is open, and in the capturing thread while any
// non-relaxed capture of its own is open; some calls (synchronising a capturing stream,
// querying an event recorded inside a capture, synchronising a context that holds a
// capturing stream) conflict with a capture in every mode. A forbidden call fails *and
// invalidates the application's capture*.
//
// The rules the shim follows, enforced here and by the simulated driver's tests:
//  1. The shim's own threads (the drainer) run in relaxed interaction mode for good.
//  2. Shim calls made on an application thread that could be unsafe (fence events of
//     the in-flight limiter) run inside a RelaxedScope.
//  3. Nothing is recorded into, waited on or synchronised on a capturing stream.
//  4. A context is synchronised only while no capture is open in the process; a capture
//     cannot begin while the drainer synchronises (begin waits for it, bounded by the
//     in-flight bound of queued work).
// Cost: one relaxed load of a process-wide counter on the launch path while no capture
// is open; begin/end capture pay a mutex and one cuStreamIsCapturing each.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "core/driver_calls.h"

namespace fracgpu {

// The stream a call of a per-thread-default-stream (_ptsz) variant names when given the
// null stream: the per-thread stream, a different one from the legacy stream.
inline CUstream explicit_stream(CUstream stream, bool per_thread) noexcept {
  return (stream == nullptr && per_thread) ? CU_STREAM_PER_THREAD : stream;
}

// The driver calls it makes are CaptureOps (core/driver_calls.h); a null entry degrades
// safely (see each use).
class CaptureTracker {
 public:
  // The process's tracker (every hook and the drainer threads share it).
  static CaptureTracker& process();

  void init(const CaptureOps& ops) noexcept { ops_ = ops; }
  const CaptureOps& ops() const noexcept { return ops_; }

  // True while any capture sequence begun through the shim is open in this process.
  bool any_open() const noexcept { return open_.load(std::memory_order_relaxed) > 0; }
  uint32_t open_count() const noexcept { return open_.load(std::memory_order_relaxed); }

  // Is `stream` (already the explicit per-thread or legacy handle) capturing? An error
  // of the query (e.g. the legacy stream while a blocking stream captures) counts as
  // capturing: the shim then leaves the stream alone.
  bool capturing(CUstream stream) const noexcept;
  // Stricter: true only when the driver says the stream captures (for the allocation
  // hooks, which charge as usual when in doubt).
  bool surely_capturing(CUstream stream) const noexcept {
    return capture_state(stream) == State::kCapturing;
  }

  // cuStreamBeginCapture*: `call` is the real begin. Counts the sequence as open
  // before the driver opens it, so that a drainer never synchronises a context that is
  // about to capture.
  template <typename Call>
  CUresult begin(Call&& call) noexcept {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    open_.fetch_add(1, std::memory_order_seq_cst);
    const CUresult rc = call();
    if (rc != CUDA_SUCCESS) close_one();
    return rc;
  }

  // cuStreamEndCapture*: `call` is the real end. The sequence is over when the stream
  // captured before the call and no longer does after it (an end on a joined stream
  // that is not the origin leaves the capture open, as the driver does).
  template <typename Call>
  CUresult end(CUstream stream, Call&& call) noexcept {
    const bool was_capturing = capture_state(stream) == State::kCapturing;
    const CUresult rc = call();
    if (was_capturing && capture_state(stream) == State::kNotCapturing) close_one();
    return rc;
  }

  // Runs `sync` (a context synchronisation) only while no capture is open, and keeps
  // captures from beginning until it returns. False when it did not run.
  template <typename Sync>
  bool run_unless_capturing(Sync&& sync) noexcept {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    if (open_.load(std::memory_order_seq_cst) > 0) return false;
    sync();
    return true;
  }

  // Puts the calling thread in relaxed capture interaction mode for good (shim threads).
  void relax_this_thread() const noexcept;

  // Relaxed interaction mode for the calling thread while in scope. Always switched,
  // not only while a capture is open: a capture another thread begins while this scope
  // waits on a fence would otherwise be invalidated by the next event query. Cost: two
  // cheap driver calls (thread-local state) per limiter slow path, i.e. once per fence.
  class RelaxedScope {
   public:
    explicit RelaxedScope(const CaptureTracker* tracker) noexcept;  // null: no-op
    ~RelaxedScope();
    RelaxedScope(const RelaxedScope&) = delete;
    RelaxedScope& operator=(const RelaxedScope&) = delete;

   private:
    const CaptureTracker* tracker_;
    bool exchanged_ = false;
    CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_GLOBAL;
  };

  // After fork(): the child has no capture open and a fresh mutex.
  void reset_after_fork() noexcept;

 private:
  enum class State { kCapturing, kNotCapturing, kUnknown };
  State capture_state(CUstream stream) const noexcept;
  void close_one() noexcept;

  CaptureOps ops_;
  std::atomic<uint32_t> open_{0};
  std::mutex sync_mutex_;
};

}  // namespace fracgpu
