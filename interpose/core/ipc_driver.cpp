// Resolution of IpcDriverCalls (see ipc_driver.h). Runs once, at the first cuIpc* call.
#include "core/ipc_driver.h"

namespace fracgpu {
namespace {

template <typename Pfn>
void resolve(SymbolLookup lookup, void* context, const char* symbol, Pfn* field) {
  *field = reinterpret_cast<Pfn>(lookup(context, symbol));
}

}  // namespace

void resolve_ipc_driver_calls(SymbolLookup lookup, void* context, IpcDriverCalls* c) {
  resolve(lookup, context, "cuMemExportToShareableHandle", &c->cuMemExportToShareableHandle);
  resolve(lookup, context, "cuMemImportFromShareableHandle", &c->cuMemImportFromShareableHandle);
  resolve(lookup, context, "cuMemGetAllocationPropertiesFromHandle",
          &c->cuMemGetAllocationPropertiesFromHandle);
  resolve(lookup, context, "cuMemAddressReserve", &c->cuMemAddressReserve);
  resolve(lookup, context, "cuMemAddressFree", &c->cuMemAddressFree);
  resolve(lookup, context, "cuMemMap", &c->cuMemMap);
  resolve(lookup, context, "cuMemUnmap", &c->cuMemUnmap);
  resolve(lookup, context, "cuMemSetAccess", &c->cuMemSetAccess);
  resolve(lookup, context, "cuMemRelease", &c->cuMemRelease);
  resolve(lookup, context, "cuCtxGetCurrent", &c->cuCtxGetCurrent);
  resolve(lookup, context, "cuCtxGetDevice", &c->cuCtxGetDevice);
  resolve(lookup, context, "cuDeviceGetCount", &c->cuDeviceGetCount);
  resolve(lookup, context, "cuDeviceCanAccessPeer", &c->cuDeviceCanAccessPeer);
}

}  // namespace fracgpu
