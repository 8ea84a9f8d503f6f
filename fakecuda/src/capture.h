// Stream capture. A capture session owns the graph being built (or, for
// cuStreamBeginCaptureToGraph, borrows the application's graph); the origin stream and
// every stream that joins it (by waiting on an event recorded in a capturing stream,
// the fork/join pattern frameworks use) append nodes to it, each stream tracking its
// own current dependency frontier.
//
// The capture interaction rules of the real driver are enforced here too (see the
// "Capture rules" section of fakecuda/README.md). Each thread has an interaction
// mode (cuThreadExchangeStreamCaptureMode, default GLOBAL); each session remembers the
// mode it was begun with and the thread that began it (its owner).
//  - A "potentially unsafe" call (event/stream query and synchronisation, context
//    synchronisation, synchronous allocation, copies and sets, module loads) is
//    prohibited for a thread in GLOBAL mode while it owns a non-relaxed session or any
//    other thread owns a GLOBAL session; in THREAD_LOCAL mode while it owns a
//    non-relaxed session; never in RELAXED mode.
//  - A call that necessarily conflicts with a capture is invalid in every mode:
//    synchronising or querying a capturing stream, an event last recorded in a capture,
//    or a context with a capturing stream, and using the legacy NULL stream while a
//    blocking stream of its context captures.
// A prohibited or conflicting call fails and invalidates the sessions it offended:
// their captured calls and cuStreamEndCapture then return
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "graph.h"

namespace fakecuda {

class Event;
class Stream;

class CaptureSession {
 public:
  CaptureSession(std::shared_ptr<Graph> target, uint64_t capture_id,
                 CUstreamCaptureMode capture_mode, bool graph_owned);

  std::shared_ptr<Graph> graph;
  const uint64_t id;
  const CUstreamCaptureMode mode;
  const std::thread::id owner;  // the thread that began the sequence
  const bool owns_graph;        // false when capturing into the application's graph
  const uint64_t generation;    // driver_generation() at begin
  std::atomic<bool> invalidated{false};
  std::atomic<bool> ended{false};

  // A stream joined the session (the origin at begin, others by fork).
  void add_member(CUcontext context, unsigned stream_flags);
  // True if a member stream belongs to `context` (and is blocking, if asked).
  bool has_member_in(CUcontext context, bool blocking_only);

 private:
  struct Member {
    CUcontext context;
    bool blocking;
  };
  std::mutex mutex_;
  std::vector<Member> members_;
};

CUresult begin_capture(Stream& stream, CUstreamCaptureMode mode);
// cuStreamBeginCaptureToGraph: capture into `graph`, the first node depending on
// `dependencies` (nodes of `graph`).
CUresult begin_capture_to_graph(Stream& stream, const std::shared_ptr<Graph>& graph,
                                const CUgraphNode* dependencies, size_t dependency_count,
                                CUstreamCaptureMode mode);
CUresult end_capture(Stream& stream, CUgraph& graph_out);
CUstreamCaptureStatus capture_status(Stream& stream);

// Records `op` as a node of the stream's capture; returns false if not capturing.
bool capture_operation(Stream& stream, const Operation& op, CUresult& result);

// Marks a capturing stream's capture invalid (a forbidden call happened during it).
void invalidate_capture(Stream& stream);

// cuStreamUpdateCaptureDependencies: flags 0/CU_STREAM_ADD_CAPTURE_DEPENDENCIES adds
// `dependencies` to the stream's frontier, CU_STREAM_SET_CAPTURE_DEPENDENCIES replaces it.
CUresult update_capture_dependencies(Stream& stream, const CUgraphNode* dependencies,
                                     size_t dependency_count, unsigned flags);

// Capture info for cuStreamGetCaptureInfo (status, id, graph, dependency frontier).
struct CaptureInfo {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* dependencies = nullptr;
  size_t dependency_count = 0;
};
CaptureInfo capture_info(Stream& stream);

// Event record while capturing: remembers the stream's capture frontier in the event.
// Returns false when the stream is not capturing (record normally then); `result` is
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED when the capture was invalidated.
bool capture_record_event(Stream& stream, Event& event, CUresult& result);
// Event wait involving a capture: fork (a stream joins the capture) or join (frontiers
// merge). `handled` is false when neither side is capturing (wait normally then).
CUresult capture_wait_event(Stream& stream, Event& event, bool& handled);

// The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
CUstreamCaptureMode exchange_thread_capture_mode(CUstreamCaptureMode mode);

// --- interaction rules (each check is one relaxed load while no capture is open) ---

// A potentially unsafe call: CUDA_SUCCESS if the calling thread may make it, otherwise
// invalidates the sessions that prohibit it and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
CUresult check_unsafe_call();
// Work submitted to `handle` (launch, async copy/set, event record/wait, callback):
// the legacy NULL stream is unusable while a blocking stream of the current context
// captures; such use invalidates those captures and returns
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. _ptsz entry points pass per_thread_handle(h).
CUresult check_stream_use(CUstream handle);
// Synchronous copies and sets (on `handle`, the legacy or per-thread stream):
// check_stream_use, then check_unsafe_call.
CUresult check_synchronous_transfer(CUstream handle);
// cuStreamSynchronize / cuStreamQuery of `stream` (resolved from `handle`): a
// capturing stream conflicts (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), the legacy stream
// as in check_stream_use, then check_unsafe_call.
CUresult check_stream_wait(Stream& stream, CUstream handle);
// cuEventQuery / cuEventSynchronize: an event last recorded in an open capture
// conflicts (CUDA_ERROR_CAPTURED_EVENT), then check_unsafe_call.
CUresult check_event_wait(Event& event);
// cuCtxSynchronize: a context with a capturing stream conflicts
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), then check_unsafe_call.
CUresult check_context_wait(CUcontext context);
// cuStreamIsCapturing / cuStreamGetCaptureInfo: true if `handle` is the legacy stream
// while a blocking stream of the current context captures (the caller then returns
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; nothing is invalidated).
bool legacy_stream_implicitly_captured(CUstream handle);

}  // namespace fakecuda
