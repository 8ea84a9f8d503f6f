// The socket a tenant's processes talk to (<run-dir>/tenants|pods/<name>/broker.sock).
// Identity is the socket itself plus SO_PEERCRED: at accept only root, the broker's uid
// and the tenant's owners are admitted (registration_refusal); "register" gives the
// calling process a ledger slot (re-using its live slot after a broker restart), starts
// watching it and passes it the ledger as a descriptor (with --mps, also the MPS pipe
// directory and the process's client priority); "view" passes a read-only one;
// "burst" asks the MemoryArbiter for grant above the guaranteed request. A process that
// registers again after its ledger was lost names its old slot and what it holds: that is
// re-charged into its slot within the bounds of recharge_policy.h (the device's
// per-process usage where the usage port reads it), and taken out of the tenant's hold
// (ledger_rebuild.h).
#pragma once

#include <sys/types.h>

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/event_loop.h"
#include "core/ledger_reconciler.h"
#include "core/line_server.h"
#include "core/memory_arbiter.h"
#include "core/nvml_port.h"
#include "core/process_tracker.h"
#include "core/recharge_policy.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {

// Why a peer of `peer_uid` may not talk to the tenant's socket, or nullopt when it may:
// root and `broker_uid` always may; otherwise the tenant's owners, or anyone for a
// tenant without owners (only its pod's mount reaches that socket).
std::optional<std::string> registration_refusal(const TenantSpec& spec, uid_t peer_uid,
                                                uid_t broker_uid);

// A re-registration's claims, by quota device (protocol.h, minor 2).
using RechargeClaims = std::array<std::optional<RechargeClaim>, kMaxDevices>;

class AuditService;  // audit_service.h
class MpsDaemon;     // mps_daemon.h

struct TenantServices {
  TenantRegistry& registry;
  ProcessTracker& tracker;
  LedgerReconciler& reconciler;
  MemoryArbiter& arbiter;
  AuditService* audit = nullptr;  // books check: flagged tenants get no burst (handle_burst)
  MpsDaemon* mps = nullptr;       // --mps: registrations learn the MPS pipe and priority
  GpuUsagePort* usage = nullptr;  // NVML, when the broker reads it: bounds re-charges
};

class TenantSocketServer {
 public:
  TenantSocketServer(EventLoop& loop, TenantServices services, std::string tenant);

  Status listen();
  void shutdown(bool unlink) { server_.shutdown(unlink); }

  // Request dispatch, public for tests that drive the server without a socket.
  nlohmann::json handle(Peer& peer, const nlohmann::json& request);

 private:
  nlohmann::json handle_register(Peer& peer, Tenant& tenant, const nlohmann::json& request);
  nlohmann::json handle_view(Peer& peer, Tenant& tenant, const nlohmann::json& request);
  bool attach_quota(Peer& peer, Tenant& tenant);
  nlohmann::json handle_burst(Tenant& tenant, const nlohmann::json& request);
  void rebuild_if_damaged(Tenant& tenant);
  // The re-charge of a re-registration's "holdings" into `slot` (protocol.h, minor 2).
  nlohmann::json recharge(Tenant& tenant, uint32_t slot, pid_t pid, uint64_t start_time,
                          const RechargeClaims& claims);

  TenantServices services_;
  std::string tenant_;
  LineServer server_;
};

}  // namespace fracgpu::broker
