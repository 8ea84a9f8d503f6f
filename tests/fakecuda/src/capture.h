// Stream capture. A capture session owns the graph being built; the origin stream and
// every stream that joins it (by waiting on an event recorded in a capturing stream,
// the fork/join pattern frameworks use) append nodes to it, each stream tracking its
// own current dependency frontier. Synchronising a capturing stream invalidates the
// capture, as on the real driver.
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>

#include "graph.h"

namespace fakecuda {

class Stream;

class CaptureSession {
 public:
  CaptureSession(std::shared_ptr<Graph> target, uint64_t capture_id,
                 CUstreamCaptureMode capture_mode)
      : graph(std::move(target)), id(capture_id), mode(capture_mode) {}

  std::shared_ptr<Graph> graph;
  const uint64_t id;
  const CUstreamCaptureMode mode;
  std::atomic<bool> invalidated{false};
};

CUresult begin_capture(Stream& stream, CUstreamCaptureMode mode);
CUresult end_capture(Stream& stream, CUgraph& graph_out);
CUstreamCaptureStatus capture_status(Stream& stream);

// Records `op` as a node of the stream's capture; returns false if not capturing.
bool capture_operation(Stream& stream, const Operation& op, CUresult& result);

// Marks a capturing stream's capture invalid (a forbidden call happened during it).
void invalidate_capture(Stream& stream);

// Capture info for cuStreamGetCaptureInfo (status, id, graph, dependency frontier).
struct CaptureInfo {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* dependencies = nullptr;
  size_t dependency_count = 0;
};
CaptureInfo capture_info(Stream& stream);

class Event;

// Event record while capturing: remembers the stream's capture frontier in the event.
// Returns false when the stream is not capturing (record normally then).
bool capture_record_event(Stream& stream, Event& event);
// Event wait involving a capture: fork (a stream joins the capture) or join (frontiers
// merge). `handled` is false when neither side is capturing (wait normally then).
CUresult capture_wait_event(Stream& stream, Event& event, bool& handled);

// The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
CUstreamCaptureMode exchange_thread_capture_mode(CUstreamCaptureMode mode);

}  // namespace fakecuda
