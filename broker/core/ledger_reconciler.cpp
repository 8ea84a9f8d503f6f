// Reconcile scheduling for LedgerReconciler; the counter arithmetic itself is in
// ledger_ops.cpp.
#include "ledger_reconciler.h"

#include <spdlog/spdlog.h>

#include "ledger_ops.h"

namespace fracgpu::broker {

bool LedgerReconciler::try_reconcile(Tenant& tenant) {
  TenantLedger& ledger = tenant.ledger();
  if (!ledger::reconcile_all(ledger, kMaxDevices, kAttemptsPerPass)) return false;
  ledger::free_dead_slots(ledger);
  return true;
}

void LedgerReconciler::process_died(Tenant& tenant, uint32_t slot) {
  ledger::mark_dead(tenant.ledger(), slot);
  // Exact and immediate unless the process died inside a reserve/release.
  if (!ledger::release_dead_slot(tenant.ledger(), slot)) reconcile(tenant);
  settle_at_[tenant.spec.name] = Clock::now() + std::chrono::seconds(1);
}

void LedgerReconciler::reconcile(Tenant& tenant) {
  if (try_reconcile(tenant)) {
    pending_.erase(tenant.spec.name);
    return;
  }
  if (pending_.insert(tenant.spec.name).second) {
    spdlog::warn("tenant {}: counters too busy to reconcile now; retrying", tenant.spec.name);
  }
}

void LedgerReconciler::tick(Clock::time_point now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Tenant* t = registry_.find(*it);
    it = (t == nullptr || try_reconcile(*t)) ? pending_.erase(it) : std::next(it);
  }
  for (auto it = settle_at_.begin(); it != settle_at_.end();) {
    if (it->second > now) {
      ++it;
      continue;
    }
    if (Tenant* t = registry_.find(it->first)) reconcile(*t);
    it = settle_at_.erase(it);
  }
}

void LedgerReconciler::forget(const std::string& tenant) {
  pending_.erase(tenant);
  settle_at_.erase(tenant);
}

}  // namespace fracgpu::broker
