// Stream capture sessions and the capture interaction rules (see capture.h).
#include "capture.h"

#include <execinfo.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "context.h"
#include "driver.h"
#include "event.h"
#include "stream.h"

namespace fakecuda {
namespace {

using SessionList = std::vector<std::shared_ptr<CaptureSession>>;

std::atomic<uint64_t> g_next_capture_id{1};

// The sessions begun and not yet ended in this process. A session of an older driver
// generation (the driver was shut down under it: tests only) no longer counts.
std::mutex g_open_mutex;
SessionList g_open;
std::atomic<size_t> g_open_count{0};

// The calling thread's interaction mode, reset to GLOBAL by a driver shutdown.
struct ThreadMode {
  uint64_t generation = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
};
thread_local ThreadMode t_capture_mode;

CUstreamCaptureMode thread_mode() {
  if (t_capture_mode.generation != driver_generation()) return CU_STREAM_CAPTURE_MODE_GLOBAL;
  return t_capture_mode.mode;
}

void open_session(const std::shared_ptr<CaptureSession>& session) {
  std::lock_guard lock(g_open_mutex);
  g_open.push_back(session);
  g_open_count.store(g_open.size());
}

void close_session(const CaptureSession* session) {
  std::lock_guard lock(g_open_mutex);
  g_open.erase(std::remove_if(g_open.begin(), g_open.end(),
                              [session](const std::shared_ptr<CaptureSession>& open) {
                                return open.get() == session;
                              }),
               g_open.end());
  g_open_count.store(g_open.size());
}

SessionList open_sessions() {
  if (g_open_count.load(std::memory_order_relaxed) == 0) return {};
  uint64_t generation = driver_generation();
  std::lock_guard lock(g_open_mutex);
  g_open.erase(std::remove_if(g_open.begin(), g_open.end(),
                              [generation](const std::shared_ptr<CaptureSession>& open) {
                                return open->generation != generation;
                              }),
               g_open.end());
  g_open_count.store(g_open.size());
  return g_open;
}

// The sessions that make a potentially unsafe call prohibited for the calling thread.
SessionList prohibiting_sessions() {
  SessionList open = open_sessions();
  if (open.empty()) return {};
  CUstreamCaptureMode mode = thread_mode();
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return {};
  std::thread::id self = std::this_thread::get_id();
  SessionList prohibiting;
  for (const std::shared_ptr<CaptureSession>& session : open) {
    bool own = session->owner == self;
    if (own ? session->mode != CU_STREAM_CAPTURE_MODE_RELAXED
            : mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                  session->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)
      prohibiting.push_back(session);
  }
  return prohibiting;
}

bool is_legacy_stream_handle(CUstream handle) {
  return handle == nullptr || handle == CU_STREAM_LEGACY;
}

// The sessions with a blocking stream in the current context, if `handle` is the legacy
// stream (which then has an implicit dependency on them).
SessionList implicit_sessions(CUstream handle) {
  if (!is_legacy_stream_handle(handle)) return {};
  SessionList open = open_sessions();
  if (open.empty()) return {};
  std::shared_ptr<Context> context = current_context();
  if (!context) return {};
  SessionList implicit;
  for (const std::shared_ptr<CaptureSession>& session : open) {
    if (session->has_member_in(context->handle(), true)) implicit.push_back(session);
  }
  return implicit;
}

// Invalidates the `conflicting` sessions and, for a potentially unsafe call, those that
// prohibit it; returns the conflict's error first, else the prohibition's.
// FAKECUDA_TRACE_CAPTURE=1: every invalidation prints the call stack that caused it on
// stderr (which call of which library broke the capture).
void trace_invalidation(const CaptureSession& session, CUresult why) {
  static const bool enabled = [] {
    const char* v = std::getenv("FAKECUDA_TRACE_CAPTURE");
    return v != nullptr && *v == '1';
  }();
  if (!enabled) return;
  std::fprintf(stderr, "fakecuda: capture %llu invalidated (error %d) by:\n",
               static_cast<unsigned long long>(session.id), static_cast<int>(why));
  void* frames[24];
  backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
}

CUresult enforce(const SessionList& conflicting, CUresult conflict_error, bool unsafe) {
  CUresult result = CUDA_SUCCESS;
  for (const std::shared_ptr<CaptureSession>& session : conflicting) {
    session->invalidated.store(true);
    trace_invalidation(*session, conflict_error);
    result = conflict_error;
  }
  if (unsafe) {
    for (const std::shared_ptr<CaptureSession>& session : prohibiting_sessions()) {
      session->invalidated.store(true);
      trace_invalidation(*session, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
      if (result == CUDA_SUCCESS) result = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return result;
}

void add_unique(std::vector<CUgraphNode>& into, const CUgraphNode* nodes, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (std::find(into.begin(), into.end(), nodes[i]) == into.end()) into.push_back(nodes[i]);
  }
}

// The capture an event was last recorded in, if that capture is still open.
std::shared_ptr<CaptureSession> open_capture_of(Event& event) {
  if (event.capture && !event.capture->ended.load()) return event.capture;
  return nullptr;
}

CUresult begin(Stream& stream, std::shared_ptr<Graph> graph, bool owns_graph,
               const CUgraphNode* dependencies, size_t dependency_count, CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(stream.capture_mutex);
  if (stream.capture) return CUDA_ERROR_ILLEGAL_STATE;
  auto session = std::make_shared<CaptureSession>(std::move(graph), g_next_capture_id.fetch_add(1),
                                                  mode, owns_graph);
  session->add_member(stream.context(), stream.flags());
  stream.capture = session;
  stream.capture_origin = true;
  stream.capture_dependencies.clear();
  add_unique(stream.capture_dependencies, dependencies, dependency_count);
  open_session(session);
  return CUDA_SUCCESS;
}

}  // namespace

CaptureSession::CaptureSession(std::shared_ptr<Graph> target, uint64_t capture_id,
                               CUstreamCaptureMode capture_mode, bool graph_owned)
    : graph(std::move(target)),
      id(capture_id),
      mode(capture_mode),
      owner(std::this_thread::get_id()),
      owns_graph(graph_owned),
      generation(driver_generation()) {}

void CaptureSession::add_member(CUcontext context, unsigned stream_flags) {
  std::lock_guard lock(mutex_);
  members_.push_back(Member{context, (stream_flags & CU_STREAM_NON_BLOCKING) == 0});
}

bool CaptureSession::has_member_in(CUcontext context, bool blocking_only) {
  std::lock_guard lock(mutex_);
  return std::any_of(members_.begin(), members_.end(), [&](const Member& member) {
    return member.context == context && (member.blocking || !blocking_only);
  });
}

CUresult begin_capture(Stream& stream, CUstreamCaptureMode mode) {
  Driver* driver = current_driver();
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  auto graph = std::make_shared<Graph>();
  CUresult result = begin(stream, graph, true, nullptr, 0, mode);
  if (result == CUDA_SUCCESS) driver->handles.add(graph);
  return result;
}

CUresult begin_capture_to_graph(Stream& stream, const std::shared_ptr<Graph>& graph,
                                const CUgraphNode* dependencies, size_t dependency_count,
                                CUstreamCaptureMode mode) {
  if (current_driver() == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (!graph || (dependency_count != 0 && dependencies == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < dependency_count; ++i) {
    if (!graph->owns(dependencies[i])) return CUDA_ERROR_INVALID_VALUE;
  }
  return begin(stream, graph, false, dependencies, dependency_count, mode);
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
  if (session->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
      session->owner != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  session->ended.store(true);
  close_session(session.get());
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
    // A graph the application passed to cuStreamBeginCaptureToGraph stays its own.
    if (session->owns_graph) {
      if (auto graph = driver->handles.take<Graph>(session->graph.get()))
        graph->forget_nodes(driver->handles);
    }
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

CUresult update_capture_dependencies(Stream& stream, const CUgraphNode* dependencies,
                                     size_t dependency_count, unsigned flags) {
  if (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)
    return CUDA_ERROR_INVALID_VALUE;
  if (dependency_count != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(stream.capture_mutex);
  if (!stream.capture) return CUDA_ERROR_ILLEGAL_STATE;
  if (stream.capture->invalidated.load()) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  for (size_t i = 0; i < dependency_count; ++i) {
    if (!stream.capture->graph->owns(dependencies[i])) return CUDA_ERROR_INVALID_VALUE;
  }
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) stream.capture_dependencies.clear();
  add_unique(stream.capture_dependencies, dependencies, dependency_count);
  return CUDA_SUCCESS;
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

bool capture_record_event(Stream& stream, Event& event, CUresult& result) {
  std::lock_guard lock(stream.capture_mutex);
  if (!stream.capture) return false;
  if (stream.capture->invalidated.load()) {
    result = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  std::lock_guard event_lock(event.capture_mutex);
  event.capture = stream.capture;
  event.capture_dependencies = stream.capture_dependencies;
  result = CUDA_SUCCESS;
  return true;
}

CUresult capture_wait_event(Stream& stream, Event& event, bool& handled) {
  std::scoped_lock lock(stream.capture_mutex, event.capture_mutex);
  handled = false;
  std::shared_ptr<CaptureSession> event_capture = open_capture_of(event);
  if (!event_capture) {
    // Waiting on an event from outside the capture is not allowed inside one.
    if (stream.capture) {
      stream.capture->invalidated.store(true);
      handled = true;
      return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    // An event last recorded in a capture that has ended stands for no work.
    handled = event.capture != nullptr;
    return CUDA_SUCCESS;
  }
  handled = true;
  if (event_capture->invalidated.load()) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (!stream.capture) {  // fork: this stream joins the capture
    stream.capture = event_capture;
    stream.capture_origin = false;
    stream.capture_dependencies = event.capture_dependencies;
    event_capture->add_member(stream.context(), stream.flags());
    return CUDA_SUCCESS;
  }
  if (stream.capture != event_capture) {
    // Two independent capture sequences would merge.
    stream.capture->invalidated.store(true);
    event_capture->invalidated.store(true);
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  }
  add_unique(stream.capture_dependencies, event.capture_dependencies.data(),
             event.capture_dependencies.size());  // join
  return CUDA_SUCCESS;
}

CUstreamCaptureMode exchange_thread_capture_mode(CUstreamCaptureMode mode) {
  CUstreamCaptureMode previous = thread_mode();
  t_capture_mode = ThreadMode{driver_generation(), mode};
  return previous;
}

CUresult check_unsafe_call() {
  return enforce({}, CUDA_SUCCESS, true);
}

CUresult check_stream_use(CUstream handle) {
  return enforce(implicit_sessions(handle), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, false);
}

CUresult check_synchronous_transfer(CUstream handle) {
  return enforce(implicit_sessions(handle), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true);
}

CUresult check_stream_wait(Stream& stream, CUstream handle) {
  std::shared_ptr<CaptureSession> own;
  {
    std::lock_guard lock(stream.capture_mutex);
    own = stream.capture;
  }
  if (own) return enforce({own}, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true);
  return enforce(implicit_sessions(handle), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, true);
}

CUresult check_event_wait(Event& event) {
  std::shared_ptr<CaptureSession> captured;
  {
    std::lock_guard lock(event.capture_mutex);
    captured = open_capture_of(event);
  }
  SessionList conflicting;
  if (captured) conflicting.push_back(captured);
  return enforce(conflicting, CUDA_ERROR_CAPTURED_EVENT, true);
}

CUresult check_context_wait(CUcontext context) {
  SessionList conflicting;
  for (const std::shared_ptr<CaptureSession>& session : open_sessions()) {
    if (session->has_member_in(context, false)) conflicting.push_back(session);
  }
  return enforce(conflicting, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, true);
}

bool legacy_stream_implicitly_captured(CUstream handle) {
  return !implicit_sessions(handle).empty();
}

}  // namespace fakecuda
