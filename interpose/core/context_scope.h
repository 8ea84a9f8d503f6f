// ContextScope: pushes a CUDA context on the calling thread for a scope. The shim's own
// threads (the swap thread, the staging workers) have no current context, and the driver
// refuses what needs one (cuMemHostRegister: CUDA_ERROR_INVALID_CONTEXT). Cost: one push
// and one pop per scope.
#pragma once

#include <cuda.h>

#include "core/driver_calls.h"

namespace fracgpu {

class ContextScope {
 public:
  ContextScope(const DriverCalls& calls, CUcontext ctx) : calls_(calls) {
    pushed_ = ctx != nullptr && calls_.cuCtxPushCurrent != nullptr &&
              calls_.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
  }
  ~ContextScope() {
    CUcontext popped = nullptr;
    if (pushed_) calls_.cuCtxPopCurrent(&popped);
  }
  ContextScope(const ContextScope&) = delete;
  ContextScope& operator=(const ContextScope&) = delete;

 private:
  const DriverCalls& calls_;
  bool pushed_ = false;
};

}  // namespace fracgpu
