// Contexts: created contexts (cuCtxCreate*) and primary contexts (cuDevicePrimaryCtx*),
// and the calling thread's current-context stack. A context owns its executor
// (StreamQueue) and its legacy default stream, and charges FAKECUDA_CONTEXT_FOOTPRINT
// bytes of device memory while it exists, like the few hundred MiB a real context
// costs. Destroying a context finishes its work and frees its allocations.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "handle_registry.h"
#include "stream_queue.h"

namespace fakecuda {

class Driver;
class Stream;

class Context : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Context;

  Context(Driver& driver, uint32_t device, unsigned flags, bool primary);
  ~Context() override;

  CUcontext handle() { return reinterpret_cast<CUcontext>(this); }
  uint32_t device() const { return device_; }
  bool primary() const { return primary_; }
  uint64_t id() const { return id_; }
  unsigned flags() const { return flags_.load(); }
  void set_flags(unsigned flags) { flags_.store(flags); }
  StreamQueue& queue() { return *queue_; }
  const std::shared_ptr<StreamQueue>& shared_queue() { return queue_; }
  const std::shared_ptr<Stream>& default_stream() { return default_stream_; }

  // Waits for all work, then reports the context's sticky error if any.
  CUresult synchronize();

  std::mutex settings_mutex;
  std::map<int, size_t> limits;
  CUfunc_cache cache_config = CU_FUNC_CACHE_PREFER_NONE;
  std::set<CUcontext> peers;

 private:
  uint32_t device_;
  bool primary_;
  uint64_t id_;
  std::atomic<unsigned> flags_;
  std::shared_ptr<StreamQueue> queue_;
  std::shared_ptr<Stream> default_stream_;
};

// Creates a context, charging its footprint (CUDA_ERROR_OUT_OF_MEMORY if it does not fit).
CUresult create_context(Driver& driver, uint32_t device, unsigned flags, bool primary,
                        std::shared_ptr<Context>& out);
// Finishes the context's work, frees its memory and streams, unregisters it.
void destroy_context(Driver& driver, const std::shared_ptr<Context>& context);

// Primary contexts.
CUresult retain_primary_context(Driver& driver, uint32_t device, CUcontext& out);
CUresult release_primary_context(Driver& driver, uint32_t device);
CUresult reset_primary_context(Driver& driver, uint32_t device);

// The calling thread's context stack.
std::shared_ptr<Context> current_context();
CUresult require_current_context(std::shared_ptr<Context>& out);
void push_current_context(CUcontext context);
CUcontext pop_current_context();
void set_current_context(CUcontext context);
CUcontext top_current_context();
// Removes `context` from the top of the calling thread's stack if it is there.
void forget_current_context(CUcontext context);

}  // namespace fakecuda
