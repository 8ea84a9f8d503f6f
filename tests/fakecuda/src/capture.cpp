// Stream capture sessions (see capture.h).
#include "capture.h"

#include <algorithm>

#include "driver.h"
#include "event.h"
#include "stream.h"

namespace fakecuda {
namespace {

std::atomic<uint64_t> g_next_capture_id{1};
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

void add_unique(std::vector<CUgraphNode>& into, const std::vector<CUgraphNode>& nodes) {
  for (CUgraphNode node : nodes) {
    if (std::find(into.begin(), into.end(), node) == into.end()) into.push_back(node);
  }
}

}  // namespace

CUresult begin_capture(Stream& stream, CUstreamCaptureMode mode) {
  Driver* driver = current_driver();
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(stream.capture_mutex);
  if (stream.capture) return CUDA_ERROR_ILLEGAL_STATE;
  auto graph = std::make_shared<Graph>();
  driver->handles.add(graph);
  stream.capture = std::make_shared<CaptureSession>(graph, g_next_capture_id.fetch_add(1), mode);
  stream.capture_origin = true;
  stream.capture_dependencies.clear();
  return CUDA_SUCCESS;
}

CUresult end_capture(Stream& stream, CUgraph& graph_out) {
  Driver* driver = current_driver();
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  std::shared_ptr<CaptureSession> session;
  {
    std::lock_guard lock(stream.capture_mutex);
    if (!stream.capture) return CUDA_ERROR_ILLEGAL_STATE;
    if (!stream.capture_origin) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    session = stream.capture;
  }
  // Every stream that joined the session leaves it with the origin.
  for (const std::shared_ptr<Stream>& other : driver->handles.all<Stream>()) {
    std::lock_guard lock(other->capture_mutex);
    if (other->capture == session) {
      other->capture.reset();
      other->capture_dependencies.clear();
      other->capture_origin = false;
    }
  }
  {
    std::lock_guard lock(stream.capture_mutex);
    stream.capture.reset();
    stream.capture_dependencies.clear();
    stream.capture_origin = false;
  }
  if (session->invalidated.load()) {
    if (auto graph = driver->handles.take<Graph>(session->graph.get()))
      graph->forget_nodes(driver->handles);
    graph_out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  graph_out = session->graph->handle();
  return CUDA_SUCCESS;
}

CUstreamCaptureStatus capture_status(Stream& stream) {
  std::lock_guard lock(stream.capture_mutex);
  if (!stream.capture) return CU_STREAM_CAPTURE_STATUS_NONE;
  return stream.capture->invalidated.load() ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                            : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

bool capture_operation(Stream& stream, const Operation& op, CUresult& result) {
  Driver* driver = current_driver();
  std::lock_guard lock(stream.capture_mutex);
  if (!stream.capture || driver == nullptr) return false;
  if (stream.capture->invalidated.load()) {
    result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  CUgraphNode node = nullptr;
  result = stream.capture->graph->add_node(driver->handles, op, stream.capture_dependencies.data(),
                                           stream.capture_dependencies.size(), node);
  if (result == CUDA_SUCCESS) stream.capture_dependencies.assign(1, node);
  return true;
}

void invalidate_capture(Stream& stream) {
  std::lock_guard lock(stream.capture_mutex);
  if (stream.capture) stream.capture->invalidated.store(true);
}

CaptureInfo capture_info(Stream& stream) {
  std::lock_guard lock(stream.capture_mutex);
  CaptureInfo info;
  if (!stream.capture) return info;
  info.status = stream.capture->invalidated.load() ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  info.id = stream.capture->id;
  info.graph = stream.capture->graph->handle();
  info.dependencies = stream.capture_dependencies.data();
  info.dependency_count = stream.capture_dependencies.size();
  return info;
}

bool capture_record_event(Stream& stream, Event& event) {
  std::lock_guard lock(stream.capture_mutex);
  if (!stream.capture) return false;
  std::lock_guard event_lock(event.capture_mutex);
  event.capture = stream.capture;
  event.capture_dependencies = stream.capture_dependencies;
  return true;
}

CUresult capture_wait_event(Stream& stream, Event& event, bool& handled) {
  std::scoped_lock lock(stream.capture_mutex, event.capture_mutex);
  handled = false;
  if (!event.capture) {
    // Waiting on an event from outside the capture is not allowed inside one.
    if (stream.capture) {
      stream.capture->invalidated.store(true);
      handled = true;
      return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    return CUDA_SUCCESS;
  }
  handled = true;
  if (event.capture->invalidated.load()) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (!stream.capture) {  // fork: this stream joins the capture
    stream.capture = event.capture;
    stream.capture_origin = false;
    stream.capture_dependencies = event.capture_dependencies;
    return CUDA_SUCCESS;
  }
  if (stream.capture != event.capture) return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  add_unique(stream.capture_dependencies, event.capture_dependencies);  // join
  return CUDA_SUCCESS;
}

CUstreamCaptureMode exchange_thread_capture_mode(CUstreamCaptureMode mode) {
  CUstreamCaptureMode previous = t_capture_mode;
  t_capture_mode = mode;
  return previous;
}

}  // namespace fakecuda
