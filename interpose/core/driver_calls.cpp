// Resolution of the driver-call structs from tables/driver_calls.def (see driver_calls.h).
// Runs once per process at initialisation; never on a hot path.
#include "core/driver_calls.h"

namespace fracgpu {

void resolve_driver_calls(SymbolLookup lookup, void* context, DriverCalls* calls) {
#define FRACGPU_DRIVER_CALL(member, symbol, pfn) \
  calls->member = reinterpret_cast<pfn>(lookup(context, #symbol));
#include "tables/driver_calls.def"
}

void resolve_driver_calls(SymbolLookup lookup, void* context, FenceOps* ops) {
#define FRACGPU_FENCE_OP(member, symbol, pfn) \
  ops->member = reinterpret_cast<pfn>(lookup(context, #symbol));
#include "tables/driver_calls.def"
}

void resolve_driver_calls(SymbolLookup lookup, void* context, CaptureOps* ops) {
#define FRACGPU_CAPTURE_OP(member, symbol, pfn) \
  ops->member = reinterpret_cast<pfn>(lookup(context, #symbol));
#include "tables/driver_calls.def"
}

}  // namespace fracgpu
