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

void MemoryAccounting::release_all_at_exit() {
  if (exited_.exchange(true)) return;
  processes_->retire(slot_);
}

}  // namespace fakecuda
