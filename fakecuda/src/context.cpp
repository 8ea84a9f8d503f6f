// Context creation/destruction and primary-context reference counting (see context.h).
#include "context.h"

#include "device_memory.h"
#include "driver.h"
#include "stream.h"

namespace fakecuda {

Context::Context(Driver& driver, uint32_t device, unsigned flags, bool primary)
    : HandleObject(kKind),
      device_(device),
      primary_(primary),
      id_(driver.next_id()),
      flags_(flags) {
  queue_ =
      std::make_shared<StreamQueue>(driver.layout(), device, &driver.process_record(),
                                    driver.engine_party(id_), driver.allocations, driver.mps());
  default_stream_ = std::make_shared<Stream>(queue_, handle(), device, 0, 0, driver.next_id());
}

Context::~Context() {
  queue_->shutdown();
}

CUresult Context::synchronize() {
  queue_->drain();
  return queue_->sticky_error();
}

CUresult create_context(Driver& driver, uint32_t device, unsigned flags, bool primary,
                        std::shared_ptr<Context>& out) {
  // Like the real MPS server after a client's fatal fault (mps_state.h).
  if (driver.mps() != nullptr && driver.mps()->refuses_contexts(device))
    return CUDA_ERROR_MPS_SERVER_NOT_READY;
  uint64_t footprint = driver.context_footprint();
  if (!driver.memory().charge(device, footprint)) return CUDA_ERROR_OUT_OF_MEMORY;
  try {
    out = std::make_shared<Context>(driver, device, flags, primary);
  } catch (...) {
    driver.memory().uncharge(device, footprint);
    throw;
  }
  driver.handles.add(out);
  return CUDA_SUCCESS;
}

void destroy_context(Driver& driver, const std::shared_ptr<Context>& context) {
  CUcontext handle = context->handle();
  if (!driver.handles.take<Context>(handle)) return;  // already destroyed by another thread
  context->queue().shutdown();                        // finishes queued work first
  for (const std::shared_ptr<Stream>& stream : driver.handles.all<Stream>()) {
    if (stream->context() == handle) driver.handles.take<Stream>(stream.get());
  }
  free_context_memory(driver, handle);
  driver.memory().uncharge(context->device(), driver.context_footprint());
  forget_current_context(handle);
}

CUresult retain_primary_context(Driver& driver, uint32_t device, CUcontext& out) {
  PrimaryContextSlot& slot = driver.primary_contexts[device];
  std::lock_guard lock(slot.mutex);
  if (!slot.context) {
    CUresult status = create_context(driver, device, slot.flags, true, slot.context);
    if (status != CUDA_SUCCESS) return status;
  }
  ++slot.retain_count;
  out = slot.context->handle();
  return CUDA_SUCCESS;
}

CUresult release_primary_context(Driver& driver, uint32_t device) {
  PrimaryContextSlot& slot = driver.primary_contexts[device];
  std::lock_guard lock(slot.mutex);
  if (slot.retain_count == 0 || !slot.context) return CUDA_ERROR_INVALID_CONTEXT;
  if (--slot.retain_count == 0) {
    destroy_context(driver, slot.context);
    slot.context.reset();
  }
  return CUDA_SUCCESS;
}

CUresult reset_primary_context(Driver& driver, uint32_t device) {
  PrimaryContextSlot& slot = driver.primary_contexts[device];
  std::lock_guard lock(slot.mutex);
  if (slot.context) destroy_context(driver, slot.context);
  slot.context.reset();
  slot.retain_count = 0;
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
