// Returning a dead process's memory to its tenant, and putting a lost ledger's books
// back together. On a death the slot is marked Dead and reclaimed by the layout-1.1 rules
// (ledger::reclaim_dead_slots): exactly, at once, when the process died between
// operations; through a consistent snapshot of the live slots when it died inside one. If
// busy processes keep that snapshot from settling within a bounded number of tries, the
// tenant is retried on every maintenance tick (100 ms) until it does, so the memory is
// back well within a second. A ledger that was rebuilt or re-created under live processes
// (at start, or found with a zeroed header once a second while the broker runs) gets a
// hold until they re-register (ledger_rebuild.h); while either is open, pending() tells
// the books check to leave the tenant's ledger alone.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "core/file_mappers.h"
#include "core/ledger_rebuild.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {

class LedgerReconciler {
 public:
  static constexpr int kAttemptsPerPass = 1000;
  static constexpr unsigned kHeaderCheckEvery = 10;  // ticks: once a second

  explicit LedgerReconciler(TenantRegistry& registry, FileMappersScan scan = scan_file_mappers)
      : registry_(registry), rebuilds_(std::move(scan)) {}

  // The process in `slot` has exited: mark it dead and give its memory back.
  void process_died(Tenant& tenant, uint32_t slot);
  // Reclaims every Dead slot of the tenant now, or queues a retry; the first call after a
  // start whose ledgers were lost opens their holds.
  void reconcile(Tenant& tenant);
  // Retries that are due, the holds' progress, and (once a second) ledger headers.
  void tick();
  void forget(const std::string& tenant) {
    pending_.erase(tenant);
    rebuilds_.forget(tenant);
  }
  bool pending(const std::string& tenant) const {
    return pending_.count(tenant) != 0 || rebuilds_.pending(tenant);
  }
  LedgerRebuilds& rebuilds() { return rebuilds_; }

 private:
  void check_headers();

  TenantRegistry& registry_;
  std::set<std::string> pending_;
  LedgerRebuilds rebuilds_;
  unsigned ticks_ = 0;
};

}  // namespace fracgpu::broker
