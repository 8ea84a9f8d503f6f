// Operations on a tenant's shared ledger that follow the rules in tenant_segment.h:
// process slots (claim, find, mark dead, free), the reconcile after a process dies,
// and the grant adjustments that must tolerate processes racing on the counters.
// reserve()/release() are the reference implementation of the shim's fast path; the
// broker never calls them, the tests and tools use them to play a tenant process.
#pragma once

#include <cstdint>
#include <optional>

#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker::ledger {

// Zeroes the ledger and stamps the header (magic last, so a concurrent reader never
// sees a valid magic over a half-written layout).
void initialize(TenantLedger& ledger);

// The slot of a live process with this pid and start time, if any.
std::optional<uint32_t> find_live_slot(const TenantLedger& ledger, int32_t pid, uint64_t start_time);

// find_live_slot, else a free slot filled with pid/start_time and state=Live.
// nullopt when all kMaxProcesses slots are taken.
std::optional<uint32_t> claim_slot(TenantLedger& ledger, int32_t pid, uint64_t start_time);

void mark_dead(TenantLedger& ledger, uint32_t slot);

// Zeroes and frees every Dead slot. Call only after a reconcile that stuck.
void free_dead_slots(TenantLedger& ledger);

uint32_t live_process_count(const TenantLedger& ledger);
uint64_t live_slot_sum(const TenantLedger& ledger, uint32_t device);

// The exact reclaim of a dead process: when its slot's op_seq is even (it died between
// operations), subtracts the slot's used[] from every device counter and frees the
// slot. False, leaving the slot Dead, when it died inside an operation: then only a
// snapshot reconcile (below) is exact.
bool release_dead_slot(TenantLedger& ledger, uint32_t slot);

// DeviceUsage.used := sum of live slots, from a consistent snapshot: the counter is
// read, every live slot's op_seq collected (all even), the slots summed, the op_seqs
// collected again; only identical collects (no operation began or ended) let the CAS
// from the value read install the sum. Up to `attempts` tries; false when processes
// kept operating (retry later). A bare CAS of the sum would be ABA-prone.
bool reconcile_device(TenantLedger& ledger, uint32_t device, int attempts);
bool reconcile_all(TenantLedger& ledger, uint32_t device_count, int attempts);

// Shim fast path (reference): reserve `bytes` on `device` for the process in `slot`.
bool reserve(TenantLedger& ledger, const TenantQuota& quota, uint32_t slot, uint32_t device, uint64_t bytes);
void release(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes);

// Lowers memory_grant to `target` (never below what is in use: after the store, used is
// re-read and the grant raised back over it, capped by the limit). A process that read
// the old grant and wins its CAS after our re-read sees the lower grant on its
// post-CAS re-check and undoes its reservation.
void lower_grant(DeviceQuota& quota, DeviceUsage& usage, uint64_t target);

}  // namespace fracgpu::broker::ledger
