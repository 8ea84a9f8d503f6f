// MemoryLedger over the contract's reservation protocol (see memory_ledger.h and
// fracgpu/ledger_protocol.h, which holds the one implementation and its costs), each
// operation inside a ProcessHoldings::Operation (process_holdings.h; nothing when the
// ledger has no holdings). The slot is read inside the operation: a re-registration
// changes it only while no operation is in flight.
#include "core/memory_ledger.h"

namespace fracgpu {

using Operation = ProcessHoldings::Operation;

MemoryLedger& MemoryLedger::operator=(const MemoryLedger& other) {
  quota_ = other.quota_;
  ledger_ = other.ledger_;
  slot_.store(other.slot(), std::memory_order_relaxed);
  holdings_ = other.holdings_;
  return *this;
}

ReserveOutcome MemoryLedger::try_reserve(uint32_t device, uint64_t bytes, bool inside_cap) {
  Operation operation(holdings_, device);
  const ReserveOutcome outcome =
      ledger_protocol::try_reserve(*quota_, *ledger_, slot(), device, bytes, inside_cap);
  if (outcome == ReserveOutcome::kReserved) operation.add(bytes);
  return outcome;
}

void MemoryLedger::moved_to_host(uint32_t device, uint64_t bytes) {
  Operation operation(holdings_, device);
  ledger_protocol::moved_to_host(*ledger_, slot(), device, bytes);
  operation.to_host(bytes);
  operation.remove(bytes);
}

void MemoryLedger::left_host(uint32_t device, uint64_t bytes) {
  Operation operation(holdings_, device);
  ledger_protocol::left_host(*ledger_, slot(), device, bytes);
  operation.from_host(bytes);
}

uint64_t MemoryLedger::swapped(uint32_t device) const {
  return ledger_->devices[device].swapped.load(std::memory_order_relaxed);
}

void MemoryLedger::release(uint32_t device, uint64_t bytes) {
  Operation operation(holdings_, device);
  ledger_protocol::release(*ledger_, slot(), device, bytes);
  operation.remove(bytes);
}

void MemoryLedger::force_charge(uint32_t device, uint64_t bytes) {
  Operation operation(holdings_, device);
  ledger_protocol::force_charge(*ledger_, slot(), device, bytes);
  operation.add(bytes);
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
  return ledger_->processes[slot()].used[device].load(std::memory_order_relaxed);
}

}  // namespace fracgpu
