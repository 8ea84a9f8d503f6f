// Returning a dead process's memory to its tenant. On a death the slot is marked Dead
// and every device counter is recomputed from the live slots (ledger::reconcile_all);
// if processes keep the counter too busy for the bounded number of CAS attempts, the
// tenant is retried on every maintenance tick (100 ms) until it sticks. One second
// later a second "settle" pass runs, because a reconcile that raced with a live
// process's reservation can leave an over-count (never an under-count) behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "tenant_registry.h"

namespace fracgpu::broker {

class LedgerReconciler {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kAttemptsPerPass = 1000;

  explicit LedgerReconciler(TenantRegistry& registry) : registry_(registry) {}

  // The process in `slot` has exited: mark it dead and give its memory back.
  void process_died(Tenant& tenant, uint32_t slot);
  // Recompute the tenant's counters now (and free dead slots), or queue a retry.
  void reconcile(Tenant& tenant);
  // Retries and settle passes that are due.
  void tick(Clock::time_point now = Clock::now());
  void forget(const std::string& tenant);
  bool pending(const std::string& tenant) const { return pending_.count(tenant) != 0; }

 private:
  bool try_reconcile(Tenant& tenant);

  TenantRegistry& registry_;
  std::set<std::string> pending_;
  std::map<std::string, Clock::time_point> settle_at_;
};

}  // namespace fracgpu::broker
