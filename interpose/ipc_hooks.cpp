// Bodies of the legacy-IPC hooks: cuIpcGetMemHandle asks the exporter (core/ipc_exporter.h),
// cuIpcOpenMemHandle / cuIpcCloseMemHandle the opener (core/ipc_opener.h); each falls back to
// the driver for memory and handles that are not fracgpu's. cuMemExportToShareableHandle pins
// a swappable allocation whose physical handle the application exports itself, then calls
// the driver. The exporter exists in a tenant's process (it shares the swap engine's
// memory); the opener in every process, tenant or not. Both are created at the first cuIpc*
// call (their driver calls resolved then, from the real driver) and never destroyed; a
// forked child starts with neither an export nor a mapping of its own.
// Cost: one std::call_once check per cuIpc* call on top of the core's; nothing elsewhere.
#include <dlfcn.h>
#include <pthread.h>

#include <mutex>

#include "core/ipc_driver.h"
#include "core/ipc_exporter.h"
#include "core/ipc_opener.h"
#include "hook_bodies.h"
#include "shim_runtime.h"

namespace fracgpu::shim {
namespace {

struct IpcState {
  IpcDriverCalls calls;
  IpcExporter* exporter = nullptr;  // null in a process of no tenant
  IpcOpener* opener = nullptr;
};

std::once_flag g_ipc_once;
IpcState* g_ipc = nullptr;

void* real_symbol(void* driver, const char* name) {
  return driver != nullptr ? dlsym(driver, name) : nullptr;
}

void ipc_after_fork_in_child() {
  if (g_ipc->exporter != nullptr) g_ipc->exporter->after_fork_in_child();
  g_ipc->opener->after_fork_in_child();
}

IpcState* ipc() noexcept {
  std::call_once(g_ipc_once, [] {
    auto* s = new IpcState();
    resolve_ipc_driver_calls(&real_symbol, state() != nullptr ? state()->driver_handle : nullptr,
                             &s->calls);
    if (TenantPolicies* t = tenant()) {
      s->exporter = new IpcExporter(t->swap, s->calls);
      t->swap.set_share_listener(s->exporter);
    }
    s->opener = new IpcOpener(s->calls, s->exporter);
    g_ipc = s;
    pthread_atfork(nullptr, nullptr, &ipc_after_fork_in_child);
  });
  return g_ipc;
}

CUresult open_handle(PFN_cuIpcOpenMemHandle_v11000 real, CUdeviceptr* pdptr, CUipcMemHandle handle,
                     unsigned int flags) noexcept {
  if (auto rc = ipc()->opener->open(pdptr, handle, flags)) return *rc;
  return real(pdptr, handle, flags);
}

}  // namespace

CUresult HookBody<HookId::cuIpcGetMemHandle>::call(PFN_cuIpcGetMemHandle_v4010 real,
                                                   CUipcMemHandle* pHandle,
                                                   CUdeviceptr dptr) noexcept {
  if (tenant() == nullptr) return real(pHandle, dptr);  // nothing here is the shim's memory
  IpcExporter* exporter = ipc()->exporter;
  if (exporter != nullptr) {
    if (auto rc = exporter->get_handle(pHandle, dptr)) return *rc;
  }
  return real(pHandle, dptr);
}

CUresult HookBody<HookId::cuIpcOpenMemHandle_v2>::call(PFN_cuIpcOpenMemHandle_v11000 real,
                                                       CUdeviceptr* pdptr, CUipcMemHandle handle,
                                                       unsigned int flags) noexcept {
  return open_handle(real, pdptr, handle, flags);
}

CUresult HookBody<HookId::cuIpcOpenMemHandle>::call(PFN_cuIpcOpenMemHandle_v4010 real,
                                                    CUdeviceptr* pdptr, CUipcMemHandle handle,
                                                    unsigned int flags) noexcept {
  return open_handle(real, pdptr, handle, flags);
}

CUresult HookBody<HookId::cuIpcCloseMemHandle>::call(PFN_cuIpcCloseMemHandle_v4010 real,
                                                     CUdeviceptr dptr) noexcept {
  if (auto rc = ipc()->opener->close(dptr)) return *rc;
  return real(dptr);
}

CUresult HookBody<HookId::cuMemExportToShareableHandle>::call(
    PFN_cuMemExportToShareableHandle_v10020 real, void* shareable,
    CUmemGenericAllocationHandle handle, CUmemAllocationHandleType type,
    unsigned long long flags) noexcept {
  // Another process may map these pages now: they must never move to host.
  if (TenantPolicies* t = tenant()) handle = t->app_vmm.exported(handle);
  return real(shareable, handle, type, flags);
}

}  // namespace fracgpu::shim
