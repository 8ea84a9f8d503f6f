// IpcOpener: cuIpcOpenMemHandle / cuIpcCloseMemHandle for handles fracgpu's exporter made
// (core/ipc_exporter.h, core/ipc_handle.h); any other handle or pointer goes to the driver.
// Opening fetches the allocation's descriptor from the exporter's server, imports it
// (cuMemImportFromShareableHandle), reserves an address range, maps it there and grants the
// current context's device access (and, with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, every
// device that can reach the memory as a peer); it returns the allocation's base in this
// process, at an address of its own, as real CUDA does. A second open of the same handle
// returns the same address and counts a reference; the last cuIpcCloseMemHandle unmaps,
// releases the imported handle and frees the range.
// Charging: the mapping is made with the real driver's functions, never through the hooks,
// so this process's tenant is charged nothing (the exporter's is, as with real IPC), and
// the physical memory outlives the exporter's free while it is mapped here (the imported
// handle holds it).
// Errors are the codes the real cuIpcOpenMemHandle returns: CUDA_ERROR_INVALID_CONTEXT for
// one's own handle or no current context, CUDA_ERROR_INVALID_VALUE for a handle that can no
// longer be opened (exporter gone, allocation freed, refused) or bad flags,
// CUDA_ERROR_MAP_FAILED when the memory cannot be mapped here.
// Works in a process of any tenant, or of none (only the driver is needed).
// Cost: nothing on other calls; an open is one local round trip and four VMM calls.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "core/ipc_driver.h"
#include "core/ipc_exporter.h"
#include "core/ipc_handle.h"

namespace fracgpu {

// Asks the exporter named by `fields` for the allocation's descriptor: CUDA_SUCCESS and *fd
// (the caller's to close), or the reason it cannot be had.
CUresult fetch_exported_descriptor(const IpcHandleFields& fields, int* fd) noexcept;

class IpcOpener {
 public:
  static constexpr int kExporterTimeoutMs = 5000;

  // `self` (may be null: a process that exports nothing) tells this process's own handles.
  IpcOpener(const IpcDriverCalls& calls, const IpcExporter* self) : calls_(calls), self_(self) {}
  IpcOpener(const IpcOpener&) = delete;
  IpcOpener& operator=(const IpcOpener&) = delete;

  // nullopt: not one of our handles (the driver's own cuIpcOpenMemHandle applies).
  std::optional<CUresult> open(CUdeviceptr* dptr, const CUipcMemHandle& handle,
                               unsigned flags) noexcept;
  // nullopt: not an address open() returned.
  std::optional<CUresult> close(CUdeviceptr dptr) noexcept;
  // The child of fork() holds no mapping of its own (the driver's state is its parent's).
  void after_fork_in_child() noexcept;

  std::size_t open_mappings() const;

 private:
  struct Key {
    int32_t pid;
    uint64_t nonce;
    uint64_t id;
    bool operator<(const Key& o) const {
      return std::tie(pid, nonce, id) < std::tie(o.pid, o.nonce, o.id);
    }
  };
  struct Mapping {
    Key key{};
    uint64_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    int references = 0;
  };

  CUresult map_descriptor(int fd, uint64_t size, unsigned flags, CUdeviceptr* va,
                          CUmemGenericAllocationHandle* handle) noexcept;
  CUresult grant_access(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle handle,
                        unsigned flags) noexcept;
  void unmap(CUdeviceptr va, const Mapping& m) noexcept;

  const IpcDriverCalls& calls_;
  const IpcExporter* self_;
  mutable std::mutex mutex_;
  std::map<CUdeviceptr, Mapping> mappings_;  // by address
  std::map<Key, CUdeviceptr> by_key_;
};

}  // namespace fracgpu
