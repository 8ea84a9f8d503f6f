// Lazy resolution for the forwarders: exported driver functions fracgpu does not hook.
// Each forwarder trampoline (exports_x86_64.S) jumps through its own slot; the slot
// starts empty, and the first call lands here (arguments saved by the trampoline) to
// fill it with the real driver's function — or with a stub that returns an error when
// the driver lacks the symbol, so nothing ever jumps to NULL.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>

#include "core/shim_log.h"
#include "shim_runtime.h"

namespace {

struct ForwarderSlot {
  void* target;      // filled on first call
  const char* name;  // the exported symbol
};

CUresult missing_symbol_stub() noexcept {
  return CUDA_ERROR_NOT_FOUND;
}
CUresult no_driver_stub() noexcept {
  return CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace

extern "C" __attribute__((visibility("hidden"))) void* fracgpu_resolve_forwarder(
    ForwarderSlot* slot) noexcept {
  using namespace fracgpu;
  shim::ensure_initialized();
  void* handle = shim::state()->driver_handle;
  void* target = handle != nullptr ? dlsym(handle, slot->name) : nullptr;
  if (target == nullptr) {
    shim::warn_unavailable(slot->name);
    target = reinterpret_cast<void*>(handle != nullptr ? &missing_symbol_stub : &no_driver_stub);
  }
  __atomic_store_n(&slot->target, target, __ATOMIC_RELEASE);
  return target;
}
