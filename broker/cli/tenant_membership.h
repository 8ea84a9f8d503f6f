// The `fracgpu run` process's own registration on its tenant's socket (issue 12, design item
// 6): it registers like a shim would, without CUDA, and holds the connection while its
// command runs, so that the broker's audit can attribute a descendant that reaches the GPU
// without registering (no shim) to this tenant. The broker passes a ledger descriptor with
// the reply (protocol.h); the reply is read with plain recv, so the kernel discards it —
// the CLI never touches the tenant's ledger. The socket is close-on-exec: the command does
// not inherit it. Cost: one connection and one request line per `fracgpu run`.
#pragma once

#include <chrono>
#include <filesystem>

#include "common/result.h"

namespace fracgpu::cli {

class TenantMembership {
 public:
  // Connects to the tenant socket and registers; the broker's sentence when it refuses.
  static broker::Result<TenantMembership> join(const std::filesystem::path& socket,
                                               std::chrono::milliseconds timeout);
  TenantMembership(TenantMembership&& other) noexcept;
  TenantMembership& operator=(TenantMembership&& other) noexcept;
  TenantMembership(const TenantMembership&) = delete;
  TenantMembership& operator=(const TenantMembership&) = delete;
  ~TenantMembership();

  // Hangs up: the broker frees this process's slot.
  void leave();
  int slot() const { return slot_; }

 private:
  TenantMembership(int fd, int slot) : fd_(fd), slot_(slot) {}
  int fd_ = -1;
  int slot_ = -1;
};

}  // namespace fracgpu::cli
