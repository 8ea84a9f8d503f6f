// IpcDriverCalls: the real driver functions fracgpu's legacy-IPC emulation calls (export of a
// physical handle as a descriptor, import, a fresh address range, map, access, release) —
// filled by the preload layer from the real driver (dlsym), by unit tests with fakes. Kept
// apart from DriverCalls (tables/driver_calls.def) because only the cuIpc* hooks use them and
// they are resolved at the first such call, not at start-up. Signatures are the toolkit's
// PFN_ typedefs. A null field means the driver lacks it: the emulation then refuses (the
// caller's cuIpc* call fails with the code the driver would give memory it cannot share).
// Cost: none until the first cuIpc* call.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/driver_calls.h"

namespace fracgpu {

struct IpcDriverCalls {
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 cuMemGetAllocationPropertiesFromHandle =
      nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuCtxGetCurrent_v4000 cuCtxGetCurrent = nullptr;
  PFN_cuCtxGetDevice_v2000 cuCtxGetDevice = nullptr;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount = nullptr;
  PFN_cuDeviceCanAccessPeer_v4000 cuDeviceCanAccessPeer = nullptr;

  // What an exporter needs.
  bool can_export() const { return cuMemExportToShareableHandle != nullptr; }
  // What an opener needs (peer queries are optional).
  bool can_import() const {
    return cuMemImportFromShareableHandle != nullptr && cuMemAddressReserve != nullptr &&
           cuMemAddressFree != nullptr && cuMemMap != nullptr && cuMemUnmap != nullptr &&
           cuMemSetAccess != nullptr && cuMemRelease != nullptr && cuCtxGetCurrent != nullptr &&
           cuCtxGetDevice != nullptr;
  }
};

// Fills every field by its symbol through `lookup`.
void resolve_ipc_driver_calls(SymbolLookup lookup, void* context, IpcDriverCalls* calls);

}  // namespace fracgpu
