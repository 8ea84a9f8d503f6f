// Stream submission bookkeeping and CUstream resolution (see stream.h).
#include "stream.h"

#include "context.h"
#include "driver.h"

namespace fakecuda {

Stream::Stream(std::shared_ptr<StreamQueue> queue, CUcontext context, uint32_t device,
               unsigned flags, int priority, uint64_t id)
    : HandleObject(kKind),
      queue_(std::move(queue)),
      context_(context),
      device_(device),
      flags_(flags),
      priority_(priority),
      id_(id) {}

uint64_t Stream::submit(StreamQueue::Work work) {
  // The stream lock spans the enqueue so last_sequence_ only ever grows.
  std::lock_guard lock(mutex_);
  last_sequence_ = queue_->enqueue(std::move(work));
  return last_sequence_;
}

uint64_t Stream::last_sequence() const {
  std::lock_guard lock(mutex_);
  return last_sequence_;
}

bool is_default_stream_handle(CUstream handle) {
  return handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD;
}

CUresult resolve_stream(CUstream handle, std::shared_ptr<Stream>& out) {
  Driver* driver = current_driver();
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (is_default_stream_handle(handle)) {
    std::shared_ptr<Context> context;
    CUresult status = require_current_context(context);
    if (status != CUDA_SUCCESS) return status;
    out = context->default_stream();
    return CUDA_SUCCESS;
  }
  out = driver->handles.get<Stream>(handle);
  return out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

}  // namespace fakecuda
