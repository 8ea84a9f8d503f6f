// Operations on a tenant's shared ledger that follow the rules in tenant_segment.h:
// process slots (claim, find, mark dead), the reclaim after a process dies,
// and the grant adjustments that must tolerate processes racing on the counters.
// reserve()/release() are the shim's own fast path (fracgpu/ledger_protocol.h, one
// implementation); the broker never calls them, the tests and tools use them to play a
// tenant process.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker::ledger {

// Zeroes the ledger and stamps the header (magic last, so a concurrent reader never
// sees a valid magic over a half-written layout).
void initialize(TenantLedger& ledger);

// The slot of a live process with this pid and start time, if any.
std::optional<uint32_t> find_live_slot(const TenantLedger& ledger, int32_t pid,
                                       uint64_t start_time);

// Where claim_slot looks for a free slot: `prefer` first (a re-registering process's old
// slot), then from the lowest index, or from the highest while a rebuild is pending (so a
// new process does not take the old slot of one that has yet to re-register and may still
// write it; tenant_segment.h, "A ledger lost").
struct ClaimOptions {
  std::optional<uint32_t> prefer;
  bool from_top = false;
};

// find_live_slot, else a free slot filled with pid/start_time and state=Live (its counters,
// schedule and, minor 6, host_reserved zeroed first). nullopt when all kMaxProcesses slots
// are taken.
std::optional<uint32_t> claim_slot(TenantLedger& ledger, int32_t pid, uint64_t start_time,
                                   const ClaimOptions& options = {});

// The placeholder of a pending rebuild (tenant_segment.h, "A ledger lost"): the highest
// free slot, Live with pid 0 and start time 0 (no process), for the broker to charge.
std::optional<uint32_t> claim_placeholder(TenantLedger& ledger);
// Frees a slot whose counters were released (a placeholder): state Free last.
void free_claimed_slot(TenantLedger& ledger, uint32_t slot);
bool is_placeholder(const ProcessSlot& slot);
// The placeholders a broker left when it stopped during a hold: released (by the reclaim
// rules: exact unless it died inside a charge) and freed. Returns how many there were.
uint32_t release_placeholders(TenantLedger& ledger);

// Counts `bytes` in the slot and the tenant's counter (the slot first), never refusing:
// what the broker books for a placeholder.
void charge(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes);

// A re-registration's re-charge: raises what `slot` books on `device` to `used` resident
// bytes and `swapped` bytes on host (rounded down to kSwapPage), never lowering either;
// the slot first, then the tenant's counters, inside an op_seq bracket. Returns what the
// slot books afterwards.
struct Booked {
  uint64_t used = 0;
  uint64_t swapped = 0;
};
Booked recharge(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t used,
                uint64_t swapped);
Booked booked(const TenantLedger& ledger, uint32_t slot, uint32_t device);

void mark_dead(TenantLedger& ledger, uint32_t slot);

uint32_t live_process_count(const TenantLedger& ledger);
uint64_t live_slot_sum(const TenantLedger& ledger, uint32_t device);
// The newest ProcessSlot.last_active_ns of the live slots (0: none has swappable memory).
uint64_t last_active(const TenantLedger& ledger);

// Gives the memory of every Dead slot back and frees the slot (layout 1.1 rules):
// a slot whose process died between operations (op_seq even) holds exactly its share,
// which is subtracted; if any died inside an operation (op_seq odd), every device
// counter is recomputed from a consistent snapshot of the live slots. Returns false
// when processes kept that snapshot from settling within `attempts` tries (the odd
// slots stay Dead; call again later). A freed slot's host_reserved (minor 6) is zeroed: the
// pinned memory died with its process.
bool reclaim_dead_slots(TenantLedger& ledger, int attempts);

// DeviceUsage.used := sum of live slots, installed by CAS only from a snapshot during
// which no live slot was inside an operation and no slot's op_seq moved.
bool recompute_used(TenantLedger& ledger, uint32_t device, int attempts);

// recompute_used that also says what it saw: `settled` false when no consistent snapshot
// was found within `attempts` (nothing changed); else `seen` is the counter at the
// snapshot and `truth` the live slots' sum, installed when they differed (the books
// check, books_check.h, counts that as a corrupted ledger).
struct UsedCheck {
  bool settled = false;
  uint64_t seen = 0;
  uint64_t truth = 0;
};
UsedCheck check_used(TenantLedger& ledger, uint32_t device, int attempts);
// The same for DeviceUsage.swapped against the live slots' swapped pages (minor 3).
UsedCheck check_swapped(TenantLedger& ledger, uint32_t device, int attempts);
// The same over exactly `slots` (the broker's registered processes, whatever the slots'
// states say): what the books check compares, touching only those slots' cache lines.
UsedCheck check_used_of(TenantLedger& ledger, uint32_t device, std::span<const uint32_t> slots,
                        int attempts);
// The same for DeviceUsage.swapped against exactly those slots' swapped pages (the swap
// books, swap_books.h).
UsedCheck check_swapped_of(TenantLedger& ledger, uint32_t device, std::span<const uint32_t> slots,
                           int attempts);

// The shim's fast path (fracgpu/ledger_protocol.h): reserve `bytes` on `device` for the
// process in `slot` within its grant; false when refused.
bool reserve(TenantLedger& ledger, const TenantQuota& quota, uint32_t slot, uint32_t device,
             uint64_t bytes);
void release(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes);

// Lowers memory_grant to `target` (never below what is in use: after the store, used is
// re-read and the grant raised back over it, capped by the limit). A process that read
// the old grant and wins its CAS after our re-read sees the lower grant on its
// post-CAS re-check and undoes its reservation.
void lower_grant(DeviceQuota& quota, DeviceUsage& usage, uint64_t target);

}  // namespace fracgpu::broker::ledger
