// The socket a tenant's processes talk to (<run-dir>/tenants|pods/<name>/broker.sock).
// Identity is the socket itself plus SO_PEERCRED: at accept only root, the broker's uid
// and the tenant's owners are admitted (registration_refusal); "register" gives the
// calling process a ledger slot (re-using its live slot after a broker restart), starts
// watching it and passes it the ledger as a descriptor (with --mps, also the MPS pipe
// directory and the process's client priority); "view" passes a read-only one;
// "burst" asks the MemoryArbiter for grant above the guaranteed request.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/event_loop.h"
#include "core/ledger_reconciler.h"
#include "core/line_server.h"
#include "core/memory_arbiter.h"
#include "core/process_tracker.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {

// Why a peer of `peer_uid` may not talk to the tenant's socket, or nullopt when it may:
// root and `broker_uid` always may; otherwise the tenant's owners, or anyone for a
// tenant without owners (only its pod's mount reaches that socket).
std::optional<std::string> registration_refusal(const TenantSpec& spec, uid_t peer_uid,
                                                uid_t broker_uid);

class AuditService;  // audit_service.h
class MpsDaemon;     // mps_daemon.h

struct TenantServices {
  TenantRegistry& registry;
  ProcessTracker& tracker;
  LedgerReconciler& reconciler;
  MemoryArbiter& arbiter;
  AuditService* audit = nullptr;  // books check: flagged tenants get no burst (handle_burst)
  MpsDaemon* mps = nullptr;       // --mps: registrations learn the MPS pipe and priority
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
  nlohmann::json handle_burst(Tenant& tenant, const nlohmann::json& request);

  TenantServices services_;
  std::string tenant_;
  LineServer server_;
};

}  // namespace fracgpu::broker
