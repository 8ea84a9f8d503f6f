// Bodies of the stream-capture and executable-graph hooks, each one call into the core.
// Begin/end capture keep the process's count of open captures (core/capture_tracker.h),
// which is what lets the drainer and the in-flight limiter stay out of an application's
// capture. Instantiate, upload, destroy and trim keep the graph-memory charge
// (core/graph_memory.h); launches are gated hooks (launch_hooks.h). Without a tenant each
// body is a plain forward. Cost: begin/end pay a mutex and one capture query;
// instantiate walks the graph's nodes once; nothing here is on a launch path.
#include "hook_bodies.h"

namespace fracgpu::shim {
namespace {

template <typename Call>
CUresult begin_capture(Call&& call) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->captures.begin(call) : call();
}

template <typename Call>
CUresult end_capture(CUstream stream, bool per_thread, Call&& call) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->captures.end(explicit_stream(stream, per_thread), call) : call();
}

template <typename Call>
CUresult instantiate(CUgraphExec* exec, CUgraph graph, Call&& call) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->graphs.instantiate(exec, graph, call) : call();
}

template <typename Call>
CUresult upload(CUgraphExec exec, Call&& call) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->graphs.launch(exec, call) : call();
}

}  // namespace

CUresult HookBody<HookId::cuStreamBeginCapture>::call(PFN_cuStreamBeginCapture_v10000 real,
                                                      CUstream stream) noexcept {
  return begin_capture([&] { return real(stream); });
}

CUresult HookBody<HookId::cuStreamBeginCapture_ptsz>::call(
    PFN_cuStreamBeginCapture_v10000_ptsz real, CUstream stream) noexcept {
  return begin_capture([&] { return real(stream); });
}

CUresult HookBody<HookId::cuStreamBeginCapture_v2>::call(PFN_cuStreamBeginCapture_v10010 real,
                                                         CUstream stream,
                                                         CUstreamCaptureMode mode) noexcept {
  return begin_capture([&] { return real(stream, mode); });
}

CUresult HookBody<HookId::cuStreamBeginCapture_v2_ptsz>::call(
    PFN_cuStreamBeginCapture_v10010_ptsz real, CUstream stream, CUstreamCaptureMode mode) noexcept {
  return begin_capture([&] { return real(stream, mode); });
}

CUresult HookBody<HookId::cuStreamBeginCaptureToGraph>::call(
    PFN_cuStreamBeginCaptureToGraph_v12030 real, CUstream stream, CUgraph graph,
    const CUgraphNode* dependencies, const CUgraphEdgeData* edges, size_t count,
    CUstreamCaptureMode mode) noexcept {
  return begin_capture([&] { return real(stream, graph, dependencies, edges, count, mode); });
}

CUresult HookBody<HookId::cuStreamBeginCaptureToGraph_ptsz>::call(
    PFN_cuStreamBeginCaptureToGraph_v12030_ptsz real, CUstream stream, CUgraph graph,
    const CUgraphNode* dependencies, const CUgraphEdgeData* edges, size_t count,
    CUstreamCaptureMode mode) noexcept {
  return begin_capture([&] { return real(stream, graph, dependencies, edges, count, mode); });
}

CUresult HookBody<HookId::cuStreamEndCapture>::call(PFN_cuStreamEndCapture_v10000 real,
                                                    CUstream stream, CUgraph* graph) noexcept {
  return end_capture(stream, false, [&] { return real(stream, graph); });
}

CUresult HookBody<HookId::cuStreamEndCapture_ptsz>::call(PFN_cuStreamEndCapture_v10000_ptsz real,
                                                         CUstream stream, CUgraph* graph) noexcept {
  return end_capture(stream, true, [&] { return real(stream, graph); });
}

CUresult HookBody<HookId::cuGraphInstantiate>::call(PFN_cuGraphInstantiate_v10000 real,
                                                    CUgraphExec* exec, CUgraph graph,
                                                    CUgraphNode* error_node, char* log,
                                                    size_t log_size) noexcept {
  return instantiate(exec, graph, [&] { return real(exec, graph, error_node, log, log_size); });
}

CUresult HookBody<HookId::cuGraphInstantiate_v2>::call(PFN_cuGraphInstantiate_v11000 real,
                                                       CUgraphExec* exec, CUgraph graph,
                                                       CUgraphNode* error_node, char* log,
                                                       size_t log_size) noexcept {
  return instantiate(exec, graph, [&] { return real(exec, graph, error_node, log, log_size); });
}

CUresult HookBody<HookId::cuGraphInstantiateWithFlags>::call(
    PFN_cuGraphInstantiateWithFlags_v11040 real, CUgraphExec* exec, CUgraph graph,
    unsigned long long flags) noexcept {
  return instantiate(exec, graph, [&] { return real(exec, graph, flags); });
}

CUresult HookBody<HookId::cuGraphInstantiateWithParams>::call(
    PFN_cuGraphInstantiateWithParams_v12000 real, CUgraphExec* exec, CUgraph graph,
    CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept {
  return instantiate(exec, graph, [&] { return real(exec, graph, params); });
}

CUresult HookBody<HookId::cuGraphInstantiateWithParams_ptsz>::call(
    PFN_cuGraphInstantiateWithParams_v12000_ptsz real, CUgraphExec* exec, CUgraph graph,
    CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept {
  return instantiate(exec, graph, [&] { return real(exec, graph, params); });
}

CUresult HookBody<HookId::cuGraphExecDestroy>::call(PFN_cuGraphExecDestroy_v10000 real,
                                                    CUgraphExec exec) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->graphs.destroy(exec, [&] { return real(exec); }) : real(exec);
}

CUresult HookBody<HookId::cuGraphUpload>::call(PFN_cuGraphUpload_v11010 real, CUgraphExec exec,
                                               CUstream stream) noexcept {
  return upload(exec, [&] { return real(exec, stream); });
}

CUresult HookBody<HookId::cuGraphUpload_ptsz>::call(PFN_cuGraphUpload_v11010_ptsz real,
                                                    CUgraphExec exec, CUstream stream) noexcept {
  return upload(exec, [&] { return real(exec, stream); });
}

CUresult HookBody<HookId::cuDeviceGraphMemTrim>::call(PFN_cuDeviceGraphMemTrim_v11040 real,
                                                      CUdevice device) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->graphs.trim(device, [&] { return real(device); }) : real(device);
}

}  // namespace fracgpu::shim
