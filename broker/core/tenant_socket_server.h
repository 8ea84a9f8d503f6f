// The socket a tenant's processes talk to (<run-dir>/tenants/<name>/broker.sock).
// Identity is the socket itself plus SO_PEERCRED's pid: "register" gives the calling
// process a ledger slot (re-using its live slot after a broker restart) and starts
// watching it; "burst" asks the MemoryArbiter for grant above the guaranteed request.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/event_loop.h"
#include "core/ledger_reconciler.h"
#include "core/line_server.h"
#include "core/memory_arbiter.h"
#include "core/process_tracker.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {

struct TenantServices {
  TenantRegistry& registry;
  ProcessTracker& tracker;
  LedgerReconciler& reconciler;
  MemoryArbiter& arbiter;
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
  nlohmann::json handle_burst(Tenant& tenant, const nlohmann::json& request);

  TenantServices services_;
  std::string tenant_;
  LineServer server_;
};

}  // namespace fracgpu::broker
