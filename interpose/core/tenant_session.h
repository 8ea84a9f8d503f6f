// TenantSession: this process's membership of a tenant. attach() registers with the
// broker over the tenant socket (which is what identifies the tenant), then maps the
// tenant's quota read-only by path and its ledger read-write from the descriptor the
// broker passed with the reply (protocol 2: the ledger has no path a tenant can reach).
// From then on allocations are counted in shared memory; the broker is only asked for
// burst memory beyond the grant. If the broker goes away, the mapped counters keep
// enforcing the caps; the session reconnects and re-registers (keeping its slot and its
// mapping) on the next burst request.
#pragma once

#include <cstdint>
#include <string>

#include "core/broker_connection.h"
#include "core/memory_ledger.h"
#include "core/mps_client_env.h"
#include "core/tenant_link.h"
#include "core/tenant_view.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class TenantSession : public TenantLink {
 public:
  TenantSession() = default;
  ~TenantSession() override;
  TenantSession(const TenantSession&) = delete;
  TenantSession& operator=(const TenantSession&) = delete;

  bool attach(const std::string& socket_path, int timeout_ms, std::string* error);
  bool attached() const { return quota_ != nullptr; }

  MemoryLedger& ledger() override { return ledger_; }
  const TenantQuota* quota() const override { return quota_; }
  const std::string& tenant() const override { return tenant_; }
  std::optional<DeviceMemoryView> memory_view(const char* uuid) const {
    return attached() ? device_memory_view(*quota_, *ledger_map_, uuid) : std::nullopt;
  }
  uint32_t slot() const override { return slot_; }
  const std::string& directory() const { return directory_; }
  // From the first registration's reply: this process's MPS server and client priority
  // when the broker runs MPS (protocol.h, minor 1); an empty pipe_dir otherwise.
  const MpsClientSettings& mps() const { return mps_; }
  TenantLedger* ledger_map() override { return ledger_map_; }

  // In a child after fork(): drop the parent's connection; the child registers as a
  // process of its own (with its own slot) before its first allocation.
  void forget_parent_after_fork();
  bool needs_registration() const override { return forked_; }
  bool register_forked_child(std::string* error) override;

  // Asks the broker to raise the grant on `device` so that `bytes` more fit.
  bool request_burst(uint32_t device, uint64_t bytes, std::string* error) override;

 private:
  bool register_process(int timeout_ms, std::string* error);
  bool map_files(const std::string& quota_name, int ledger_fd, std::string* error);
  // A re-registration's descriptor must be the file this process already counts in.
  bool same_ledger(int ledger_fd) const;
  void unmap();

  std::string socket_path_;
  std::string directory_;
  BrokerConnection connection_;
  std::string tenant_;
  uint32_t slot_ = 0;
  bool forked_ = false;
  const TenantQuota* quota_ = nullptr;
  std::size_t quota_size_ = 0;
  TenantLedger* ledger_map_ = nullptr;
  std::size_t ledger_size_ = 0;
  uint64_t ledger_dev_ = 0, ledger_ino_ = 0;
  MemoryLedger ledger_;
  MpsClientSettings mps_;
};

}  // namespace fracgpu
