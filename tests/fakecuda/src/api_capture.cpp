// Stream capture entry points: cuStreamBeginCapture (v1 and v2 ABIs), EndCapture,
// IsCapturing, GetCaptureInfo (v1/v2/v3) with their _ptsz variants, and
// cuThreadExchangeStreamCaptureMode. The capture logic lives in capture.cpp.
#include "api_support.h"
#include "capture.h"
#include "stream.h"

using namespace fakecuda;

namespace {

CUresult begin(CUstream hStream, CUstreamCaptureMode mode) {
  return with_driver([&](Driver&) {
    if (is_default_stream_handle(hStream)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    return begin_capture(*stream, mode);
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
  return with_driver([&](Driver&) {
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
  return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCapture_v2(CUstream hStream,
                                                          CUstreamCaptureMode mode) {
  return begin(hStream, mode);
}
extern "C" CUresult fakecuda_impl_cuStreamBeginCapture_v2_ptsz(CUstream hStream,
                                                               CUstreamCaptureMode mode) {
  return begin(hStream, mode);
}
extern "C" CUresult fakecuda_impl_cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return end(hStream, phGraph);
}
extern "C" CUresult fakecuda_impl_cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return end(hStream, phGraph);
}
extern "C" CUresult fakecuda_impl_cuStreamIsCapturing(CUstream hStream,
                                                      CUstreamCaptureStatus* captureStatus) {
  return is_capturing(hStream, captureStatus);
}
extern "C" CUresult fakecuda_impl_cuStreamIsCapturing_ptsz(CUstream hStream,
                                                           CUstreamCaptureStatus* captureStatus) {
  return is_capturing(hStream, captureStatus);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo(CUstream hStream,
                                                         CUstreamCaptureStatus* captureStatus_out,
                                                         cuuint64_t* id_out) {
  return info(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCaptureInfo_ptsz(
    CUstream hStream, CUstreamCaptureStatus* captureStatus_out, cuuint64_t* id_out) {
  return info(hStream, captureStatus_out, id_out, nullptr, nullptr, nullptr, nullptr);
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
  return info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, nullptr,
              numDependencies_out);
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
  return info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
              numDependencies_out);
}
extern "C" CUresult fakecuda_impl_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = exchange_thread_capture_mode(*mode);
  return CUDA_SUCCESS;
}
