// Device-memory accounting against the shared device: a reservation succeeds only if
// it fits the device's capacity (compare-and-swap, so racing processes can never
// overshoot by a byte), and every reservation is also recorded in the caller's
// process slot so that it can be reclaimed if the process dies without freeing.
#pragma once

#include <atomic>
#include <cstdint>

#include "process_table.h"
#include "shared_segment.h"

namespace fakecuda {

// Who a charge was made for: a process slot and the process that held it then.
struct ChargeOwner {
  int32_t slot = -1;
  int32_t pid = 0;
  uint64_t start_time = 0;
};

class MemoryAccounting {
 public:
  MemoryAccounting(SegmentLayout* layout, ProcessTable* processes, int process_slot)
      : layout_(layout), processes_(processes), slot_(process_slot) {}

  // Reserves `bytes` on `device`; false means the device is out of memory even after
  // reclaiming the memory of dead processes.
  bool charge(uint32_t device, uint64_t bytes);
  void uncharge(uint32_t device, uint64_t bytes);
  // This process, as the owner of what it charges.
  ChargeOwner owner() const;
  // Returns a charge made by `owner`, possibly another process (memory shared across
  // processes is charged to its creator until its last holder lets go). Nothing when that
  // process is gone: its slot's memory went back to the device when it was reclaimed.
  void uncharge_owner(const ChargeOwner& owner, uint32_t device, uint64_t bytes);

  // Process exit: gives all of this process's device memory back at once, as a real
  // driver does when a process exits; later charges/uncharges (threads still running
  // during exit) are ignored so nothing is returned twice.
  void release_all_at_exit();

  ProcessTable& processes() const { return *processes_; }
  uint64_t capacity(uint32_t device) const { return layout_->devices[device].capacity_bytes; }
  uint64_t used(uint32_t device) const { return layout_->devices[device].used_bytes.load(); }

 private:
  bool try_reserve(uint32_t device, uint64_t bytes);
  void raise_peak(uint32_t device, uint64_t used_now);

  SegmentLayout* layout_;
  ProcessTable* processes_;
  int slot_;
  std::atomic<bool> exited_{false};
};

}  // namespace fakecuda
