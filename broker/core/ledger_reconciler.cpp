// Reclaim scheduling for LedgerReconciler; the counter arithmetic itself is in
// ledger_ops.cpp.
#include "core/ledger_reconciler.h"

#include <spdlog/spdlog.h>

#include "core/ledger_ops.h"

namespace fracgpu::broker {

void LedgerReconciler::process_died(Tenant& tenant, uint32_t slot) {
  ledger::mark_dead(tenant.ledger(), slot);
  reconcile(tenant);
}

void LedgerReconciler::reconcile(Tenant& tenant) {
  if (ledger::reclaim_dead_slots(tenant.ledger(), kAttemptsPerPass)) {
    pending_.erase(tenant.spec.name);
    return;
  }
  if (pending_.insert(tenant.spec.name).second) {
    spdlog::warn(
        "tenant {}: a process died mid-allocation and the others are too busy to reconcile now; "
        "retrying",
        tenant.spec.name);
  }
}

void LedgerReconciler::tick() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Tenant* t = registry_.find(*it);
    it = (t == nullptr || ledger::reclaim_dead_slots(t->ledger(), kAttemptsPerPass))
             ? pending_.erase(it)
             : std::next(it);
  }
}

}  // namespace fracgpu::broker
