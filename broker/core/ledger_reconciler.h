// Returning a dead process's memory to its tenant. On a death the slot is marked Dead
// and reclaimed by the layout-1.1 rules (ledger::reclaim_dead_slots): exactly, at once,
// when the process died between operations; through a consistent snapshot of the live
// slots when it died inside one. If busy processes keep that snapshot from settling
// within a bounded number of tries, the tenant is retried on every maintenance tick
// (100 ms) until it does, so the memory is back well within a second.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "core/tenant_registry.h"

namespace fracgpu::broker {

class LedgerReconciler {
 public:
  static constexpr int kAttemptsPerPass = 1000;

  explicit LedgerReconciler(TenantRegistry& registry) : registry_(registry) {}

  // The process in `slot` has exited: mark it dead and give its memory back.
  void process_died(Tenant& tenant, uint32_t slot);
  // Reclaims every Dead slot of the tenant now, or queues a retry.
  void reconcile(Tenant& tenant);
  // Retries that are due.
  void tick();
  void forget(const std::string& tenant) { pending_.erase(tenant); }
  bool pending(const std::string& tenant) const { return pending_.count(tenant) != 0; }

 private:
  TenantRegistry& registry_;
  std::set<std::string> pending_;
};

}  // namespace fracgpu::broker
