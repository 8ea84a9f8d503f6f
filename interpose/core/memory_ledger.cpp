// The reservation protocol of MemoryLedger (see memory_ledger.h and the rules in
// fracgpu/tenant_segment.h). Cost of a successful try_reserve: one fetch_add on the
// process's own slot, one load of grant and limit, one CAS on the tenant counter, one
// re-load of grant, and (rarely) a CAS on the peak.
#include "memory_ledger.h"

namespace fracgpu {

uint64_t saturating_sub(std::atomic<uint64_t>& counter, uint64_t bytes) {
  uint64_t current = counter.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = current > bytes ? current - bytes : 0;
  } while (!counter.compare_exchange_weak(current, next, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  return next;
}

namespace {

// Brackets one reserve/release: op_seq is odd while it runs, so a broker reclaiming
// this slot after a crash knows whether the slot's counters are exact (see the rules in
// tenant_segment.h). Two uncontended RMWs on the process's own cache line.
class SlotOperation {
 public:
  explicit SlotOperation(ProcessSlot& slot) : slot_(slot) { slot_.op_seq.fetch_add(1, std::memory_order_seq_cst); }
  ~SlotOperation() { slot_.op_seq.fetch_add(1, std::memory_order_seq_cst); }
  SlotOperation(const SlotOperation&) = delete;
  SlotOperation& operator=(const SlotOperation&) = delete;

 private:
  ProcessSlot& slot_;
};

}  // namespace

ReserveOutcome MemoryLedger::try_reserve(uint32_t device, uint64_t bytes) {
  SlotOperation operation(ledger_->processes[slot_]);
  const DeviceQuota& quota = quota_->devices[device];
  DeviceUsage& usage = ledger_->devices[device];
  if (bytes > quota.memory_limit.load(std::memory_order_seq_cst)) return ReserveOutcome::kOverLimit;
  // The slot first: it may over-state, never under-state, what this process holds.
  slot_counter(device).fetch_add(bytes, std::memory_order_seq_cst);
  uint64_t used = usage.used.load(std::memory_order_seq_cst);
  for (;;) {
    const uint64_t limit = quota.memory_limit.load(std::memory_order_seq_cst);
    const uint64_t grant = quota.memory_grant.load(std::memory_order_seq_cst);
    ReserveOutcome refusal = ReserveOutcome::kReserved;
    if (used > limit || bytes > limit - used) refusal = ReserveOutcome::kOverLimit;
    else if (used > grant || bytes > grant - used) refusal = ReserveOutcome::kOverGrant;
    if (refusal != ReserveOutcome::kReserved) {
      saturating_sub(slot_counter(device), bytes);
      return refusal;
    }
    if (usage.used.compare_exchange_weak(used, used + bytes, std::memory_order_seq_cst)) break;
  }
  // The broker may have lowered the grant between our load and our CAS; it re-reads
  // `used` after lowering, and we re-read the grant after counting: one of the two
  // always notices (both sides are sequentially consistent).
  if (used + bytes > quota.memory_grant.load(std::memory_order_seq_cst)) {
    saturating_sub(usage.used, bytes);
    saturating_sub(slot_counter(device), bytes);
    return ReserveOutcome::kOverGrant;
  }
  uint64_t peak = usage.peak.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !usage.peak.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return ReserveOutcome::kReserved;
}

void MemoryLedger::release(uint32_t device, uint64_t bytes) {
  SlotOperation operation(ledger_->processes[slot_]);
  // The tenant counter first, then the slot (so the slot never under-states).
  saturating_sub(ledger_->devices[device].used, bytes);
  saturating_sub(slot_counter(device), bytes);
}

void MemoryLedger::force_charge(uint32_t device, uint64_t bytes) {
  SlotOperation operation(ledger_->processes[slot_]);
  slot_counter(device).fetch_add(bytes, std::memory_order_seq_cst);
  uint64_t now = ledger_->devices[device].used.fetch_add(bytes, std::memory_order_seq_cst) + bytes;
  uint64_t peak = ledger_->devices[device].peak.load(std::memory_order_relaxed);
  while (now > peak &&
         !ledger_->devices[device].peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void MemoryLedger::count_oom(uint32_t device) {
  ledger_->devices[device].oom_events.fetch_add(1, std::memory_order_relaxed);
}

uint64_t MemoryLedger::limit(uint32_t device) const {
  return quota_->devices[device].memory_limit.load(std::memory_order_relaxed);
}
uint64_t MemoryLedger::grant(uint32_t device) const {
  return quota_->devices[device].memory_grant.load(std::memory_order_relaxed);
}
uint64_t MemoryLedger::used(uint32_t device) const {
  return ledger_->devices[device].used.load(std::memory_order_relaxed);
}
uint64_t MemoryLedger::process_used(uint32_t device) const {
  return ledger_->processes[slot_].used[device].load(std::memory_order_relaxed);
}

}  // namespace fracgpu
