// Stream capture entry points: cuStreamBeginCapture (v1 and v2 ABIs),
// cuStreamBeginCaptureToGraph, EndCapture, IsCapturing, GetCaptureInfo (v1/v2/v3),
// UpdateCaptureDependencies (v1/v2), with their _ptsz variants, and
// cuThreadExchangeStreamCaptureMode. The capture logic lives in capture.cpp.
#include <cstring>

#include "api_support.h"
#include "capture.h"
#include "graph.h"
#include "stream.h"

using namespace fakecuda;

namespace {

// A capture mode as the application passed it: any int, as in the driver's ABI. It is
// judged as an integer and only then used as the enum, so that an out-of-range value is
// refused without ever being loaded as a CUstreamCaptureMode (undefined behaviour).
bool known_mode(int mode) {
  return mode == CU_STREAM_CAPTURE_MODE_GLOBAL || mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         mode == CU_STREAM_CAPTURE_MODE_RELAXED;
}

CUresult begin(CUstream hStream, int mode) {
  return with_driver([&](Driver&) {
    if (is_default_stream_handle(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    if (!known_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
    return begin_capture(*stream, static_cast<CUstreamCaptureMode>(mode));
  });
}

// Only default edges are simulated: edge data, where given, must be all zero.
bool default_edges(const CUgraphEdgeData* edges, size_t count) {
  if (edges == nullptr) return true;
  for (size_t i = 0; i < count; ++i) {
    const CUgraphEdgeData& edge = edges[i];
    if (edge.from_port != 0 || edge.to_port != 0 || edge.type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
      return false;
    for (unsigned char reserved : edge.reserved) {
      if (reserved != 0) return false;
    }
  }
  return true;
}

CUresult begin_to_graph(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                        const CUgraphEdgeData* edges, size_t count, int mode) {
  return with_driver([&](Driver& driver) {
    if (is_default_stream_handle(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    std::shared_ptr<Graph> graph = driver.handles.get<Graph>(hGraph);
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    if (!default_edges(edges, count)) return CUDA_ERROR_NOT_SUPPORTED;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    if (!known_mode(mode)) return CUDA_ERROR_INVALID_VALUE;
    return begin_capture_to_graph(*stream, graph, dependencies, count,
                                  static_cast<CUstreamCaptureMode>(mode));
  });
}

CUresult update_dependencies(CUstream hStream, CUgraphNode* dependencies,
                             const CUgraphEdgeData* edges, size_t count, unsigned flags) {
  return with_driver([&](Driver&) {
    if (!default_edges(edges, count)) return CUDA_ERROR_NOT_SUPPORTED;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    return update_capture_dependencies(*stream, dependencies, count, flags);
  });
}

CUresult end(CUstream hStream, CUgraph* phGraph) {
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver&) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    return end_capture(*stream, *phGraph);
  });
}

CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  if (captureStatus == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver&) {
    // The legacy stream while a blocking stream captures: an error, nothing invalidated.
    if (legacy_stream_implicitly_captured(hStream)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    *captureStatus = capture_status(*stream);
    return CUDA_SUCCESS;
  });
}

// Shared body of all GetCaptureInfo ABIs; every output is optional.
CUresult info(CUstream hStream, CUstreamCaptureStatus* status_out, cuuint64_t* id_out,
              CUgraph* graph_out, const CUgraphNode** dependencies_out,
              const CUgraphEdgeData** edges_out, size_t* count_out) {
  if (status_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges_out != nullptr && dependencies_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver&) {
    if (legacy_stream_implicitly_captured(hStream)) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    CaptureInfo captured = capture_info(*stream);
    *status_out = captured.status;
    if (id_out != nullptr) *id_out = captured.id;
    if (graph_out != nullptr) *graph_out = captured.graph;
    if (dependencies_out != nullptr) *dependencies_out = captured.dependencies;
    if (edges_out != nullptr) *edges_out = nullptr;  // all edges are default edges
    if (count_out != nullptr) *count_out = captured.dependency_count;
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuStreamBeginCapture(CUstream hStream) {
  return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCapture_ptsz(CUstream hStream) {
  return begin(per_thread_handle(hStream), CU_STREAM_CAPTURE_MODE_GLOBAL);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCapture_v2(CUstream hStream,
                                                          CUstreamCaptureMode mode) {
  return begin(hStream, mode);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCapture_v2_ptsz(CUstream hStream,
                                                               CUstreamCaptureMode mode) {
  return begin(per_thread_handle(hStream), mode);
}
extern "C" CUresult fakecuda_impl_cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return end(hStream, phGraph);
}
extern "C" CUresult fakecuda_impl_cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end(per_thread_handle(hStream), phGraph);
}
extern "C" CUresult fakecuda_impl_cuStreamIsCapturing(CUstream hStream,
                                                      CUstreamCaptureStatus* captureStatus) {
  return is_capturing(hStream, captureStatus);
}
extern "C" CUresult fakecuda_impl_cuStreamIsCapturing_ptsz(CUstream hStream,
                                                           CUstreamCaptureStatus* captureStatus) {
  return is_capturing(per_thread_handle(hStream), captureStatus);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo(CUstream hStream,
                                                         CUstreamCaptureStatus* captureStatus_out,
                                                         cuuint64_t* id_out) {
  return info(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo_ptsz(
    CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out) {
  return info(per_thread_handle(hStream), captureStatus_out, id_out, nullptr, nullptr, nullptr,
              nullptr);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo_v2(
    CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out,
    CUgraph* graph_out, const CUgraphNode** dependencies_out, size_t* numDependencies_out) {
  return info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, nullptr,
              numDependencies_out);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo_v2_ptsz(
    CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out,
    CUgraph* graph_out, const CUgraphNode** dependencies_out, size_t* numDependencies_out) {
  return info(per_thread_handle(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
              nullptr, numDependencies_out);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo_v3(
    CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out,
    CUgraph* graph_out, const CUgraphNode** dependencies_out, const CUgraphEdgeData** edgeData_out,
    size_t* numDependencies_out) {
  return info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
              numDependencies_out);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo_v3_ptsz(
    CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out,
    CUgraph* graph_out, const CUgraphNode** dependencies_out, const CUgraphEdgeData** edgeData_out,
    size_t* numDependencies_out) {
  return info(per_thread_handle(hStream), captureStatus_out, id_out, graph_out, dependencies_out,
              edgeData_out, numDependencies_out);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                              const CUgraphNode* dependencies,
                                                              const CUgraphEdgeData* dependencyData,
                                                              size_t numDependencies,
                                                              CUstreamCaptureMode mode) {
  return begin_to_graph(hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCaptureToGraph_ptsz(
    CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
    const CUgraphEdgeData* dependencyData, size_t numDependencies, CUstreamCaptureMode mode) {
  return begin_to_graph(per_thread_handle(hStream), hGraph, dependencies, dependencyData,
                        numDependencies, mode);
}
extern "C" CUresult fakecuda_impl_cuStreamUpdateCaptureDependencies(CUstream hStream,
                                                                    CUgraphNode* dependencies,
                                                                    size_t numDependencies,
                                                                    unsigned int flags) {
  return update_dependencies(hStream, dependencies, nullptr, numDependencies, flags);
}
extern "C" CUresult fakecuda_impl_cuStreamUpdateCaptureDependencies_ptsz(CUstream hStream,
                                                                         CUgraphNode* dependencies,
                                                                         size_t numDependencies,
                                                                         unsigned int flags) {
  return update_dependencies(per_thread_handle(hStream), dependencies, nullptr, numDependencies,
                             flags);
}
extern "C" CUresult fakecuda_impl_cuStreamUpdateCaptureDependencies_v2(
    CUstream hStream, CUgraphNode* dependencies, const CUgraphEdgeData* dependencyData,
    size_t numDependencies, unsigned int flags) {
  return update_dependencies(hStream, dependencies, dependencyData, numDependencies, flags);
}
extern "C" CUresult fakecuda_impl_cuStreamUpdateCaptureDependencies_v2_ptsz(
    CUstream hStream, CUgraphNode* dependencies, const CUgraphEdgeData* dependencyData,
    size_t numDependencies, unsigned int flags) {
  return update_dependencies(per_thread_handle(hStream), dependencies, dependencyData,
                             numDependencies, flags);
}
extern "C" CUresult fakecuda_impl_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Read as an integer first: an out-of-range value must be refused, not loaded as an enum.
  int requested = 0;
  std::memcpy(&requested, mode, sizeof(requested));
  if (requested != CU_STREAM_CAPTURE_MODE_GLOBAL &&
      requested != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      requested != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  *mode = exchange_thread_capture_mode(static_cast<CUstreamCaptureMode>(requested));
  return CUDA_SUCCESS;
}
