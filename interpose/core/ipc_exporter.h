// IpcExporter: cuIpcGetMemHandle for memory the shim backs itself (a swappable tenant's
// cuMemAlloc is VMM memory, on which the real driver's legacy IPC fails; docs/design.md
// "Overcommit and swap"). For such a pointer it
//   1. pins the allocation (ShareableMemory::pin_for_sharing: brought back from host first
//      if it is there, never moved again — another process maps its pages now);
//   2. exports its physical handle once as a POSIX descriptor
//      (cuMemExportToShareableHandle; the swap engine creates it exportable);
//   3. returns a handle of ours (core/ipc_handle.h): this process's pid and nonce, the
//      allocation's id and size;
// and serves the descriptor to openers from one thread, started at the first export, on an
// abstract-namespace Unix socket named from the pid and the nonce. A connecting peer gets
// the descriptor (SCM_RIGHTS) only when SO_PEERCRED says it runs as this process's uid (or
// as root) and its request carries this process's nonce and a live allocation id. The
// security boundary is the uid: abstract socket names are visible to every process of the
// network namespace (/proc/net/unix); the nonce defeats pid reuse and stale handles.
// Freed allocations (SharedFreeListener) lose their export: later opens fail, mappings
// already made stay valid (the importer's handle holds the physical memory).
// The server thread makes no CUDA calls (capture-safe) and never blocks on a peer for more
// than kPeerTimeoutMs. Everything else is a plain pass-through to the driver (nullopt).
// Cost: nothing for memory the shim does not back; the first export starts a thread.
#pragma once

#include <cuda.h>
#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "core/ipc_driver.h"
#include "core/ipc_handle.h"
#include "core/ipc_shareable.h"

namespace fracgpu {

// Who may fetch this process's exports.
struct IpcAccessRule {
  uid_t owner = ::geteuid();
  bool root_allowed = true;
  bool allows(uid_t uid) const { return uid == owner || (root_allowed && uid == 0); }
};

class IpcExporter final : public SharedFreeListener {
 public:
  static constexpr int kPeerTimeoutMs = 1000;

  IpcExporter(ShareableMemory& memory, const IpcDriverCalls& calls, IpcAccessRule rule = {});
  ~IpcExporter() override;  // stops the server (tests; the shim's lives until exit)
  IpcExporter(const IpcExporter&) = delete;
  IpcExporter& operator=(const IpcExporter&) = delete;

  // cuIpcGetMemHandle: nullopt when `ptr` is not memory the shim backs.
  std::optional<CUresult> get_handle(CUipcMemHandle* handle, CUdeviceptr ptr) noexcept;
  void shared_allocation_freed(CUdeviceptr base) noexcept override;

  // Whether `fields` names an export of this very process (opening it here is an error).
  bool owns(const IpcHandleFields& fields) const noexcept {
    return fields.pid == pid_.load(std::memory_order_relaxed) &&
           fields.nonce == nonce_.load(std::memory_order_relaxed);
  }
  // The child of fork() has no server and exports nothing; it gets its own identity.
  void after_fork_in_child() noexcept;

  // Status and tests.
  std::size_t exports() const;
  uint64_t served() const noexcept { return served_.load(std::memory_order_relaxed); }
  uint64_t refused() const noexcept { return refused_.load(std::memory_order_relaxed); }

 private:
  struct Export {
    uint64_t id = 0;
    uint64_t size = 0;
    int fd = -1;
  };

  bool start_server() noexcept;  // under mutex_
  static void* serve_main(void* exporter) noexcept;
  void serve() noexcept;
  void answer(int peer) noexcept;
  IpcReply lookup(const IpcRequest& request, int* fd) noexcept;

  ShareableMemory& memory_;
  const IpcDriverCalls& calls_;
  const IpcAccessRule rule_;
  std::atomic<int32_t> pid_;
  std::atomic<uint64_t> nonce_;
  mutable std::mutex mutex_;               // the exports and the server's start
  std::map<CUdeviceptr, Export> exports_;  // by allocation base
  uint64_t next_id_ = 1;
  int listener_ = -1;
  int stop_pipe_[2] = {-1, -1};  // written by the destructor to end the server
  pthread_t thread_{};
  bool serving_ = false;
  // Set by the server thread once it runs: start_server waits for it, so the first handle
  // is never handed out while the thread is still starting (a fork() at that moment, as
  // multiprocessing's consumers do right after cuIpcGetMemHandle, would copy the half-made
  // thread's runtime state - an allocator without fork handlers deadlocks the child).
  std::atomic<bool> server_running_{false};
  std::atomic<uint64_t> served_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace fracgpu
