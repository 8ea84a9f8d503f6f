// The driver calls the core is given rather than finds: DriverCalls (the policies'),
// FenceOps (the in-flight limiter's) and CaptureOps (the capture tracker's), generated
// from tables/driver_calls.def with their types from cudaTypedefs.h. The core never
// looks a symbol up itself: the preload layer fills these from the real driver through
// resolve_driver_calls() and a lookup function of its own (dlsym on the driver's handle),
// unit tests fill them with fakes. Resolution runs once at initialisation; afterwards a
// call is one indirect call through a field (null = the driver lacks it).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace fracgpu {

struct DriverCalls {
#define FRACGPU_DRIVER_CALL(member, symbol, pfn) pfn member = nullptr;
#include "tables/driver_calls.def"
};

struct FenceOps {
#define FRACGPU_FENCE_OP(member, symbol, pfn) pfn member = nullptr;
#include "tables/driver_calls.def"
  // The limiter needs every one of them.
  bool complete() const {
    return true
#define FRACGPU_FENCE_OP(member, symbol, pfn) &&member != nullptr
#include "tables/driver_calls.def"
        ;
  }
};

struct CaptureOps {
#define FRACGPU_CAPTURE_OP(member, symbol, pfn) pfn member = nullptr;
#include "tables/driver_calls.def"
};

// Finds a driver symbol by name (null when the driver lacks it); `context` is the
// caller's, e.g. the driver's dlopen handle.
using SymbolLookup = void* (*)(void* context, const char* symbol);

// Fills every field from its row's symbol.
void resolve_driver_calls(SymbolLookup lookup, void* context, DriverCalls* calls);
void resolve_driver_calls(SymbolLookup lookup, void* context, FenceOps* ops);
void resolve_driver_calls(SymbolLookup lookup, void* context, CaptureOps* ops);

}  // namespace fracgpu
