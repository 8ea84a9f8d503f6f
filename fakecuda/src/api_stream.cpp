// Stream entry points: creation/destruction, synchronisation and queries, waits on
// events, host callbacks, and stream properties. _ptsz variants share the plain
// implementation because all streams of a context drain through one queue.
#include "api_support.h"
#include "capture.h"
#include "event.h"
#include "operations.h"
#include "stream.h"

using namespace fakecuda;

namespace {

constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

template <typename Body>
CUresult with_stream(CUstream handle, Body&& body) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(handle, stream);
    if (status != CUDA_SUCCESS) return status;
    return body(driver, *stream);
  });
}

CUresult create_stream(CUstream* phStream, unsigned flags, int priority) {
  if (phStream == nullptr || (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return with_context([&](Driver& driver, Context& context) {
    int clamped = std::clamp(priority, kGreatestPriority, kLeastPriority);
    auto stream = std::make_shared<Stream>(context.shared_queue(), context.handle(),
                                           context.device(), flags, clamped, driver.next_id());
    driver.handles.add(stream);
    *phStream = stream->handle();
    return CUDA_SUCCESS;
  });
}

CUresult destroy_stream(CUstream hStream) {
  return with_driver([&](Driver& driver) {
    // Queued work keeps running; the stream object goes away when it is done.
    return driver.handles.take<Stream>(hStream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}

CUresult synchronize_stream(CUstream hStream) {
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    CUresult status = check_stream_wait(stream, hStream);  // see capture.h
    if (status != CUDA_SUCCESS) return status;
    stream.wait_idle();
    return stream.queue().sticky_error();
  });
}

CUresult query_stream(CUstream hStream) {
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    CUresult status = check_stream_wait(stream, hStream);
    if (status != CUDA_SUCCESS) return status;
    CUresult sticky = stream.queue().sticky_error();
    if (sticky != CUDA_SUCCESS) return sticky;
    return stream.idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  });
}

CUresult wait_event(CUstream hStream, CUevent hEvent, unsigned flags) {
  if ((flags & ~static_cast<unsigned>(CU_EVENT_WAIT_EXTERNAL)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver& driver, Stream& stream) {
    std::shared_ptr<Event> event = driver.handles.get<Event>(hEvent);
    if (!event) return CUDA_ERROR_INVALID_HANDLE;
    CUresult legacy = check_stream_use(hStream);  // the legacy stream during a capture
    if (legacy != CUDA_SUCCESS) return legacy;
    bool handled = false;
    CUresult status = capture_wait_event(stream, *event, handled);
    if (handled) return status;
    std::shared_ptr<StreamQueue> other;
    uint64_t sequence = 0;
    event->last_record(other, sequence);
    // Same queue: FIFO order already guarantees the event comes first.
    if (!other || other == stream.shared_queue()) return CUDA_SUCCESS;
    stream.submit([other, sequence](WorkScope& scope) {
      scope.engine.release();  // never hold the device while waiting for another context
      other->wait_until_completed(sequence);
    });
    return CUDA_SUCCESS;
  });
}

// `reported` is the handle the application passed (the callback receives it).
CUresult add_callback(CUstream hStream, CUstream reported, CUstreamCallback callback,
                      void* user_data, unsigned flags) {
  if (callback == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    CUresult legacy = check_stream_use(hStream);
    if (legacy != CUDA_SUCCESS) return legacy;
    if (capture_status(stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
      invalidate_capture(stream);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    stream.submit([callback, user_data, reported](WorkScope& scope) {
      scope.engine.release();
      callback(reported, scope.queue.sticky_error(), user_data);
    });
    return CUDA_SUCCESS;
  });
}

CUresult launch_host_func(CUstream hStream, CUhostFn fn, void* user_data) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    CUresult legacy = check_stream_use(hStream);
    if (legacy != CUDA_SUCCESS) return legacy;
    return submit_operation(stream, HostCallOp{fn, user_data});
  });
}

CUresult stream_priority(CUstream hStream, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    *priority = stream.priority();
    return CUDA_SUCCESS;
  });
}

CUresult stream_flags(CUstream hStream, unsigned* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    *flags = stream.flags();
    return CUDA_SUCCESS;
  });
}

CUresult stream_context(CUstream hStream, CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    *pctx = stream.context();
    return CUDA_SUCCESS;
  });
}

CUresult stream_id(CUstream hStream, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver&, Stream& stream) {
    *id = stream.id();
    return CUDA_SUCCESS;
  });
}

CUresult stream_device(CUstream hStream, CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_stream(hStream, [&](Driver& driver, Stream& stream) {
    *device = static_cast<CUdevice>(driver.ordinal_of(stream.device()));
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return create_stream(phStream, Flags, kLeastPriority);
}
extern "C" CUresult fakecuda_impl_cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                                             int priority) {
  return create_stream(phStream, flags, priority);
}
extern "C" CUresult fakecuda_impl_cuStreamDestroy_v2(CUstream hStream) {
  return destroy_stream(hStream);
}
extern "C" CUresult fakecuda_impl_cuStreamDestroy(CUstream hStream) {
  return destroy_stream(hStream);
}
extern "C" CUresult fakecuda_impl_cuStreamSynchronize(CUstream hStream) {
  return synchronize_stream(hStream);
}
extern "C" CUresult fakecuda_impl_cuStreamSynchronize_ptsz(CUstream hStream) {
  return synchronize_stream(per_thread_handle(hStream));
}
extern "C" CUresult fakecuda_impl_cuStreamQuery(CUstream hStream) {
  return query_stream(hStream);
}
extern "C" CUresult fakecuda_impl_cuStreamQuery_ptsz(CUstream hStream) {
  return query_stream(per_thread_handle(hStream));
}
extern "C" CUresult fakecuda_impl_cuStreamWaitEvent(CUstream hStream, CUevent hEvent,
                                                    unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags);
}
extern "C" CUresult fakecuda_impl_cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent,
                                                         unsigned int Flags) {
  return wait_event(per_thread_handle(hStream), hEvent, Flags);
}
extern "C" CUresult fakecuda_impl_cuStreamGetPriority(CUstream hStream, int* priority) {
  return stream_priority(hStream, priority);
}
extern "C" CUresult fakecuda_impl_cuStreamGetPriority_ptsz(CUstream hStream, int* priority) {
  return stream_priority(hStream, priority);
}
extern "C" CUresult fakecuda_impl_cuStreamGetFlags(CUstream hStream, unsigned int* flags) {
  return stream_flags(hStream, flags);
}
extern "C" CUresult fakecuda_impl_cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags) {
  return stream_flags(hStream, flags);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCtx(CUstream hStream, CUcontext* pctx) {
  return stream_context(hStream, pctx);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCtx_ptsz(CUstream hStream, CUcontext* pctx) {
  return stream_context(hStream, pctx);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCtx_v2(CUstream hStream, CUcontext* pctx,
                                                    CUgreenCtx* pGreenCtx) {
  if (pGreenCtx != nullptr) *pGreenCtx = nullptr;  // green contexts are not simulated
  return stream_context(hStream, pctx);
}
extern "C" CUresult fakecuda_impl_cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext* pctx,
                                                         CUgreenCtx* pGreenCtx) {
  return fakecuda_impl_cuStreamGetCtx_v2(hStream, pctx, pGreenCtx);
}
extern "C" CUresult fakecuda_impl_cuStreamGetId(CUstream hStream, unsigned long long* streamId) {
  return stream_id(hStream, streamId);
}
extern "C" CUresult fakecuda_impl_cuStreamGetId_ptsz(CUstream hStream,
                                                     unsigned long long* streamId) {
  return stream_id(hStream, streamId);
}
extern "C" CUresult fakecuda_impl_cuStreamGetDevice(CUstream hStream, CUdevice* device) {
  return stream_device(hStream, device);
}
extern "C" CUresult fakecuda_impl_cuStreamGetDevice_ptsz(CUstream hStream, CUdevice* device) {
  return stream_device(hStream, device);
}
extern "C" CUresult fakecuda_impl_cuStreamAddCallback(CUstream hStream, CUstreamCallback callback,
                                                      void* userData, unsigned int flags) {
  return add_callback(hStream, hStream, callback, userData, flags);
}
extern "C" CUresult fakecuda_impl_cuStreamAddCallback_ptsz(CUstream hStream,
                                                           CUstreamCallback callback,
                                                           void* userData, unsigned int flags) {
  return add_callback(per_thread_handle(hStream), hStream, callback, userData, flags);
}
extern "C" CUresult fakecuda_impl_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData);
}
extern "C" CUresult fakecuda_impl_cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn,
                                                        void* userData) {
  return launch_host_func(per_thread_handle(hStream), fn, userData);
}
