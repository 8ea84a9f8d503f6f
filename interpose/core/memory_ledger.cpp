// MemoryLedger over the contract's reservation protocol (see memory_ledger.h and
// fracgpu/ledger_protocol.h, which holds the one implementation and its costs).
#include "core/memory_ledger.h"

namespace fracgpu {

ReserveOutcome MemoryLedger::try_reserve(uint32_t device, uint64_t bytes, bool inside_cap) {
  return ledger_protocol::try_reserve(*quota_, *ledger_, slot_, device, bytes, inside_cap);
}

void MemoryLedger::moved_to_host(uint32_t device, uint64_t bytes) {
  ledger_protocol::moved_to_host(*ledger_, slot_, device, bytes);
}

void MemoryLedger::left_host(uint32_t device, uint64_t bytes) {
  ledger_protocol::left_host(*ledger_, slot_, device, bytes);
}

uint64_t MemoryLedger::swapped(uint32_t device) const {
  return ledger_->devices[device].swapped.load(std::memory_order_relaxed);
}

void MemoryLedger::release(uint32_t device, uint64_t bytes) {
  ledger_protocol::release(*ledger_, slot_, device, bytes);
}

void MemoryLedger::force_charge(uint32_t device, uint64_t bytes) {
  ledger_protocol::force_charge(*ledger_, slot_, device, bytes);
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
