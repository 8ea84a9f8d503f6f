// MemoryLedger: the allocation fast path. Reserves and releases device memory for one
// process of a tenant against the tenant's shared counters (TenantLedger) and caps
// (TenantQuota, read-only), through the contract's one implementation of the protocol
// (fracgpu/ledger_protocol.h; rules in fracgpu/tenant_segment.h). A
// reservation within the tenant's current grant is one compare-and-swap on the
// tenant's counter plus two uncontended atomics on the process's own slot: no syscall,
// no lock, no driver call. Beyond the grant the caller asks the broker for burst
// (the slow path) and tries again; beyond the hard limit the answer is final.
// With ProcessHoldings (a registered process: TenantSession), every operation also keeps
// the process's own copy of what it holds, two more uncontended RMWs on process memory,
// so that a ledger lost under the process can be re-charged (process_holdings.h). The slot
// may change only while the holdings' gate is closed (a re-registration: rebind_slot).
#pragma once

#include <atomic>
#include <cstdint>

#include "core/process_holdings.h"
#include "fracgpu/ledger_protocol.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const TenantQuota* quota, TenantLedger* ledger, uint32_t slot,
               ProcessHoldings* holdings = nullptr)
      : quota_(quota), ledger_(ledger), slot_(slot), holdings_(holdings) {}
  MemoryLedger(const MemoryLedger& other) { *this = other; }
  MemoryLedger& operator=(const MemoryLedger& other);

  bool attached() const { return quota_ != nullptr; }
  uint32_t device_count() const { return quota_ != nullptr ? quota_->device_count : 0; }

  // `inside_cap`: bytes already counted against the cap (a swap-in; ledger_protocol.h).
  ReserveOutcome try_reserve(uint32_t device, uint64_t bytes, bool inside_cap = false);
  void release(uint32_t device, uint64_t bytes);
  // Counts bytes that already exist on the device (e.g. a pool's rounding) even when
  // they exceed the grant; never blocks. Used only where refusing is impossible.
  void force_charge(uint32_t device, uint64_t bytes);
  void count_oom(uint32_t device);
  // Swap bookkeeping (tenant_segment.h, minor 3): bytes copied to host and released from
  // the device, and bytes that left the host (swapped back in, or freed while there).
  void moved_to_host(uint32_t device, uint64_t bytes);
  void left_host(uint32_t device, uint64_t bytes);
  uint64_t swapped(uint32_t device) const;

  uint64_t limit(uint32_t device) const;
  uint64_t grant(uint32_t device) const;
  uint64_t used(uint32_t device) const;
  uint64_t process_used(uint32_t device) const;

  uint32_t slot() const { return slot_.load(std::memory_order_relaxed); }
  // A re-registration's new slot; only while the holdings' gate is closed.
  void rebind_slot(uint32_t slot) { slot_.store(slot, std::memory_order_relaxed); }

 private:
  const TenantQuota* quota_ = nullptr;
  TenantLedger* ledger_ = nullptr;
  std::atomic<uint32_t> slot_{0};
  ProcessHoldings* holdings_ = nullptr;
};

}  // namespace fracgpu
