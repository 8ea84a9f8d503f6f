// Event entry points: create/destroy, record (plain, with flags, _ptsz), query,
// synchronize and elapsed time (v1 and v2 ABIs). Timestamps are taken by the executor
// when it reaches the event, so elapsed times measure simulated device time.
#include "api_support.h"
#include "capture.h"
#include "event.h"
#include "stream.h"

using namespace fakecuda;

namespace {

constexpr unsigned kKnownEventFlags =
    CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

template <typename Body>
CUresult with_event(CUevent handle, Body&& body) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Event> event = driver.handles.get<Event>(handle);
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    return body(driver, *event);
  });
}

CUresult record(CUevent hEvent, CUstream hStream, unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_EVENT_RECORD_EXTERNAL)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return with_event(hEvent, [&](Driver&, Event& event) {
    CUresult status = check_stream_use(hStream);  // the legacy stream during a capture
    if (status != CUDA_SUCCESS) return status;
    std::shared_ptr<Stream> stream;
    if ((status = resolve_stream(hStream, stream)) != CUDA_SUCCESS) return status;
    if (capture_record_event(*stream, event, status)) return status;
    event.record(*stream);
    return CUDA_SUCCESS;
  });
}

CUresult destroy(CUevent hEvent) {
  return with_driver([&](Driver& driver) {
    // A pending record keeps the event object alive until the executor reaches it.
    return driver.handles.take<Event>(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}

CUresult elapsed(float* milliseconds, CUevent hStart, CUevent hEnd) {
  if (milliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Event> start = driver.handles.get<Event>(hStart);
    std::shared_ptr<Event> end = driver.handles.get<Event>(hEnd);
    if (!start || !end || start->timing_disabled() || end->timing_disabled())
      return CUDA_ERROR_INVALID_HANDLE;
    int64_t start_ns = 0, end_ns = 0;
    bool start_recorded = false, end_recorded = false;
    bool start_done = start->completed_timestamp(start_ns, start_recorded);
    bool end_done = end->completed_timestamp(end_ns, end_recorded);
    if (!start_recorded || !end_recorded) return CUDA_ERROR_INVALID_HANDLE;
    if (!start_done || !end_done) return CUDA_ERROR_NOT_READY;
    *milliseconds = static_cast<float>(static_cast<double>(end_ns - start_ns) / 1e6);
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  if (phEvent == nullptr || (Flags & ~kKnownEventFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0)
    return CUDA_ERROR_INVALID_VALUE;
  return with_context([&](Driver& driver, Context&) {
    auto event = std::make_shared<Event>(Flags);
    driver.handles.add(event);
    *phEvent = reinterpret_cast<CUevent>(event.get());
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuEventRecord(CUevent hEvent, CUstream hStream) {
  return record(hEvent, hStream, 0);
}
extern "C" CUresult fakecuda_impl_cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  return record(hEvent, per_thread_handle(hStream), 0);
}
extern "C" CUresult fakecuda_impl_cuEventRecordWithFlags(CUevent hEvent, CUstream hStream,
                                                         unsigned int flags) {
  return record(hEvent, hStream, flags);
}
extern "C" CUresult fakecuda_impl_cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream,
                                                              unsigned int flags) {
  return record(hEvent, per_thread_handle(hStream), flags);
}

extern "C" CUresult fakecuda_impl_cuEventQuery(CUevent hEvent) {
  return with_event(hEvent, [](Driver&, Event& event) {
    CUresult status = check_event_wait(event);  // potentially unsafe; captured events conflict
    return status != CUDA_SUCCESS ? status : event.query();
  });
}

extern "C" CUresult fakecuda_impl_cuEventSynchronize(CUevent hEvent) {
  return with_event(hEvent, [](Driver&, Event& event) {
    CUresult status = check_event_wait(event);
    if (status != CUDA_SUCCESS) return status;
    event.synchronize();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuEventElapsedTime(float* pMilliseconds, CUevent hStart,
                                                     CUevent hEnd) {
  return elapsed(pMilliseconds, hStart, hEnd);
}
extern "C" CUresult fakecuda_impl_cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart,
                                                        CUevent hEnd) {
  return elapsed(pMilliseconds, hStart, hEnd);
}
extern "C" CUresult fakecuda_impl_cuEventDestroy_v2(CUevent hEvent) {
  return destroy(hEvent);
}
extern "C" CUresult fakecuda_impl_cuEventDestroy(CUevent hEvent) {
  return destroy(hEvent);
}
