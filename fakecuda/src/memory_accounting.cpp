// Capacity-checked reservations on the shared device (see memory_accounting.h).
#include "memory_accounting.h"

namespace fakecuda {

bool MemoryAccounting::try_reserve(uint32_t device, uint64_t bytes) {
  DeviceRecord& record = layout_->devices[device];
  uint64_t used = record.used_bytes.load();
  do {
    if (bytes > record.capacity_bytes || used > record.capacity_bytes - bytes) return false;
  } while (!record.used_bytes.compare_exchange_weak(used, used + bytes));
  raise_peak(device, used + bytes);
  return true;
}

void MemoryAccounting::raise_peak(uint32_t device, uint64_t used_now) {
  std::atomic<uint64_t>& peak = layout_->devices[device].peak_used_bytes;
  uint64_t seen = peak.load();
  while (seen < used_now && !peak.compare_exchange_weak(seen, used_now)) {
  }
}

bool MemoryAccounting::charge(uint32_t device, uint64_t bytes) {
  if (bytes == 0) return true;
  if (exited_.load()) return false;
  // Like a real driver, a dead process's memory is only noticed when it matters:
  // sweeping on every allocation would cost a /proc read per live process.
  if (!try_reserve(device, bytes)) {
    processes_->sweep_dead();
    if (!try_reserve(device, bytes)) return false;
  }
  processes_->slot(slot_).used_bytes[device].fetch_add(bytes);
  return true;
}

void MemoryAccounting::uncharge(uint32_t device, uint64_t bytes) {
  if (bytes == 0 || exited_.load()) return;
  processes_->slot(slot_).used_bytes[device].fetch_sub(bytes);
  layout_->devices[device].used_bytes.fetch_sub(bytes);
}

ChargeOwner MemoryAccounting::owner() const {
  const ProcessRecord& record = processes_->slot(slot_);
  return ChargeOwner{slot_, record.pid, record.start_time};
}

void MemoryAccounting::uncharge_owner(const ChargeOwner& owner, uint32_t device, uint64_t bytes) {
  if (owner.slot == slot_) {
    uncharge(device, bytes);
    return;
  }
  if (bytes == 0 || owner.slot < 0 || static_cast<uint32_t>(owner.slot) >= kMaxProcesses) return;
  ProcessRecord& record = processes_->slot(owner.slot);
  if (record.state.load(std::memory_order_acquire) != static_cast<uint32_t>(ProcessState::Live) ||
      record.pid != owner.pid || record.start_time != owner.start_time) {
    return;  // exited or reclaimed: its whole usage went back already
  }
  // Only what the slot still holds: a reclaim racing with us takes the rest (exactly once).
  std::atomic<uint64_t>& held = record.used_bytes[device];
  uint64_t now = held.load();
  do {
    if (now < bytes) return;
  } while (!held.compare_exchange_weak(now, now - bytes));
  layout_->devices[device].used_bytes.fetch_sub(bytes);
}

void MemoryAccounting::release_all_at_exit() {
  if (exited_.exchange(true)) return;
  processes_->retire(slot_);
}

}  // namespace fakecuda
