// The per-node broker: owns the GPU inventory, the tenants (registry, segments, sockets),
// the process watches and the memory arbiter, and runs them on one event loop. Start-up
// re-attaches everything a previous broker left behind — tenants from tenants.json,
// live ledgers, still-running processes — so a broker killed with SIGKILL and restarted
// loses nothing.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/admin_server.h"
#include "core/audit_service.h"
#include "core/broker_options.h"
#include "core/compute_service.h"
#include "core/event_loop.h"
#include "core/gpu_inventory.h"
#include "core/guarantee_enforcer.h"
#include "core/ledger_reconciler.h"
#include "core/memory_arbiter.h"
#include "core/metrics_server.h"
#include "core/mps_daemon.h"
#include "core/process_tracker.h"
#include "core/tenant_registry.h"
#include "core/tenant_socket_server.h"

namespace fracgpu::broker {

class Broker : public AdminBackend {
 public:
  explicit Broker(BrokerOptions options);  // options already resolved
  ~Broker() override;

  // Starts, serves until SIGINT/SIGTERM, shuts down. 0 on a clean stop, 1 when start-up failed.
  int run();

  // AdminBackend (called on the loop thread).
  Result<nlohmann::json> create_tenant(const nlohmann::json& tenant) override;
  Result<nlohmann::json> update_tenant(const nlohmann::json& tenant) override;
  Status delete_tenant(const std::string& name) override;
  nlohmann::json list_tenants() override;
  nlohmann::json list_gpus() override;
  std::string gpu_problem() override { return gpus_.problem; }

 private:
  Status start();
  Status lock_run_dir();
  void discover();
  Status open_tenant_socket(Tenant& tenant);
  void adopt_processes(Tenant& tenant);
  void on_process_death(const std::string& tenant, uint32_t slot, pid_t pid);
  void maintenance_tick();
  int kill_tenant_processes(const std::string& tenant);
  void notify_ready();
  void start_mps();
  unsigned live_processes();
  void shutdown();

  BrokerOptions options_;
  std::mutex state_mutex_;
  EventLoop loop_;
  GpuInventory gpus_;
  std::unique_ptr<TenantRegistry> registry_;
  MemoryArbiter arbiter_;
  std::unique_ptr<ProcessTracker> tracker_;
  std::unique_ptr<LedgerReconciler> reconciler_;
  std::unique_ptr<AdminServer> admin_;
  std::map<std::string, std::unique_ptr<TenantSocketServer>, std::less<>> tenant_servers_;
  std::unique_ptr<ComputeService> compute_;
  std::unique_ptr<AuditService> audit_;
  std::unique_ptr<GuaranteeEnforcer> enforcer_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<MpsDaemon> mps_;  // --mps only
  int lock_fd_ = -1;
  unsigned ticks_ = 0;
  bool enforce_due_ = true;  // an admin change may have shrunk a GPU's unguaranteed pool
};

// main() of fracgpu-broker and `fracgpu broker`: logging, option resolution, run.
int run_broker(BrokerOptions options);

}  // namespace fracgpu::broker
