// Helpers shared by the API implementation files: the driver/context prologue every
// entry point needs, and the exception fence that keeps C++ exceptions (bad_alloc,
// failing thread creation) from ever crossing the C ABI into the application.
#pragma once

#include <cuda.h>

#include <memory>
#include <new>

#include "context.h"
#include "driver.h"
#include "entry_points.h"

namespace fakecuda {

template <typename Body>
CUresult guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return CUDA_ERROR_UNKNOWN;
  }
}

// Runs body(Driver&) once cuInit has succeeded.
template <typename Body>
CUresult with_driver(Body&& body) noexcept {
  Driver* driver = current_driver();
  if (driver == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return guarded([&] { return body(*driver); });
}

// Runs body(Driver&, Context&) with the calling thread's current context.
template <typename Body>
CUresult with_context(Body&& body) noexcept {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Context> context;
    CUresult status = require_current_context(context);
    if (status != CUDA_SUCCESS) return status;
    return body(driver, *context);
  });
}

// Narrowing helper for the legacy 32-bit ABIs (CUdeviceptr_v1, unsigned int sizes).
template <typename Small, typename Large>
CUresult store_narrow(Small* out, Large value) {
  if (out == nullptr) return CUDA_SUCCESS;
  if (value > static_cast<Large>(static_cast<Small>(~Small{0}))) return CUDA_ERROR_INVALID_VALUE;
  *out = static_cast<Small>(value);
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
