// Reclaim scheduling for LedgerReconciler, and the entry points of the lost ledgers'
// holds; the counter arithmetic itself is in ledger_ops.cpp, the holds in
// ledger_rebuild.cpp.
#include "core/ledger_reconciler.h"

#include <spdlog/spdlog.h>

#include "core/ledger_ops.h"

namespace fracgpu::broker {

void LedgerReconciler::process_died(Tenant& tenant, uint32_t slot) {
  ledger::mark_dead(tenant.ledger(), slot);
  reconcile(tenant);
}

void LedgerReconciler::reconcile(Tenant& tenant) {
  // One scan for every tenant whose ledger was lost, at the first of them (at start the
  // broker reconciles each tenant before it serves anything).
  if (tenant.segments->lost_ledger())
    rebuilds_.begin(registry_.all(), LedgerRebuilds::Clock::now());
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
  if (++ticks_ % kHeaderCheckEvery == 0) check_headers();
  rebuilds_.tick(registry_, LedgerRebuilds::Clock::now());
}

// A header zeroed under the running broker: rebuilt from the slots like at start, and
// held like at start. One load per tenant, once a second.
void LedgerReconciler::check_headers() {
  bool rebuilt = false;
  for (Tenant* t : registry_.all()) rebuilt = t->segments->rebuild_if_damaged() || rebuilt;
  if (rebuilt)
    rebuilds_.begin(registry_.all(), LedgerRebuilds::Clock::now(),
                    LedgerRebuilds::Found::kWhileRunning);
}

}  // namespace fracgpu::broker
