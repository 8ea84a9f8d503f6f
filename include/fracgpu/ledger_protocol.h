// The reservation protocol on a tenant's shared ledger: the one implementation of the
// rules in tenant_segment.h ("Ordering rules"), used by the shim's allocation fast path
// (interpose/core/memory_ledger.*), and by the broker's tests and tools when they play a
// tenant process (broker/core/ledger_ops.*), so that the race tests exercise the shipped
// code. Header-only: the shim and the broker each compile it into their own binary.
//
// Cost of a successful try_reserve: one fetch_add on the process's own slot, one load of
// grant and limit, one CAS on the tenant counter, one re-load of grant, and (rarely) a
// CAS on the peak. No syscall, no lock.
#pragma once

#include <atomic>
#include <cstdint>

#include "fracgpu/tenant_segment.h"

namespace fracgpu {

enum class ReserveOutcome {
  kReserved,   // counted; the caller may allocate
  kOverGrant,  // within the limit but beyond the grant: ask the broker for burst
  kOverLimit,  // would exceed the tenant's hard cap: out of memory
};

// Subtracts without wrapping below zero (a corrupted or reconciled counter must never
// turn into 2^64 and refuse every allocation). Returns the new value.
inline uint64_t saturating_sub(std::atomic<uint64_t>& counter, uint64_t bytes) {
  uint64_t current = counter.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = current > bytes ? current - bytes : 0;
  } while (!counter.compare_exchange_weak(current, next, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  return next;
}

namespace ledger_protocol {

// Brackets one reserve/release: op_seq is odd while it runs, so a broker reclaiming the
// slot after a crash knows whether the slot's counters are exact (tenant_segment.h).
// Two uncontended RMWs on the process's own cache line.
class SlotOperation {
 public:
  explicit SlotOperation(ProcessSlot& slot) : slot_(slot) {
    slot_.op_seq.fetch_add(1, std::memory_order_seq_cst);
  }
  ~SlotOperation() { slot_.op_seq.fetch_add(1, std::memory_order_seq_cst); }
  SlotOperation(const SlotOperation&) = delete;
  SlotOperation& operator=(const SlotOperation&) = delete;

 private:
  ProcessSlot& slot_;
};

inline void raise_peak(DeviceUsage& usage, uint64_t now) {
  uint64_t peak = usage.peak.load(std::memory_order_relaxed);
  while (now > peak && !usage.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Reserves `bytes` on `device` for the process in `slot`: within the grant, or refused
// (over the grant: the caller may ask for burst; over the limit: final).
// `inside_cap`: the bytes are already counted against the cap (a swap-in: they are in
// DeviceUsage.swapped until it completes), so only the grant is checked.
inline ReserveOutcome try_reserve(const TenantQuota& quota_segment, TenantLedger& ledger,
                                  uint32_t slot, uint32_t device, uint64_t bytes,
                                  bool inside_cap = false) {
  ProcessSlot& process = ledger.processes[slot];
  SlotOperation operation(process);
  const DeviceQuota& quota = quota_segment.devices[device];
  DeviceUsage& usage = ledger.devices[device];
  std::atomic<uint64_t>& mine = process.used[device];
  if (bytes > quota.memory_limit.load(std::memory_order_seq_cst)) return ReserveOutcome::kOverLimit;
  // The slot first: it may over-state, never under-state, what this process holds.
  mine.fetch_add(bytes, std::memory_order_seq_cst);
  uint64_t used = usage.used.load(std::memory_order_seq_cst);
  for (;;) {
    // The cap bounds resident + swapped bytes (minor 3); a swap-in's bytes are in both.
    const uint64_t swapped = inside_cap ? 0 : usage.swapped.load(std::memory_order_seq_cst);
    const uint64_t cap = quota.memory_limit.load(std::memory_order_seq_cst);
    const uint64_t limit = inside_cap ? UINT64_MAX : (cap > swapped ? cap - swapped : 0);
    const uint64_t grant = quota.memory_grant.load(std::memory_order_seq_cst);
    ReserveOutcome refusal = ReserveOutcome::kReserved;
    if (used > limit || bytes > limit - used)
      refusal = ReserveOutcome::kOverLimit;
    else if (used > grant || bytes > grant - used)
      refusal = ReserveOutcome::kOverGrant;
    if (refusal != ReserveOutcome::kReserved) {
      saturating_sub(mine, bytes);
      return refusal;
    }
    if (usage.used.compare_exchange_weak(used, used + bytes, std::memory_order_seq_cst)) break;
  }
  // The broker may have lowered the grant between our load and our CAS; it re-reads
  // `used` after lowering, and we re-read the grant after counting: one of the two
  // always notices (both sides are sequentially consistent).
  if (used + bytes > quota.memory_grant.load(std::memory_order_seq_cst)) {
    saturating_sub(usage.used, bytes);
    saturating_sub(mine, bytes);
    return ReserveOutcome::kOverGrant;
  }
  raise_peak(usage, used + bytes);
  return ReserveOutcome::kReserved;
}

// Gives `bytes` back: the tenant counter first, then the slot (so the slot never
// under-states).
inline void release(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  ProcessSlot& process = ledger.processes[slot];
  SlotOperation operation(process);
  saturating_sub(ledger.devices[device].used, bytes);
  saturating_sub(process.used[device], bytes);
}

// Counts bytes that already exist on the device (a pool's rounding, graph memory the
// driver mapped) even past the grant; never refuses. Only where refusing is impossible.
inline void force_charge(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  ProcessSlot& process = ledger.processes[slot];
  SlotOperation operation(process);
  process.used[device].fetch_add(bytes, std::memory_order_seq_cst);
  const uint64_t now =
      ledger.devices[device].used.fetch_add(bytes, std::memory_order_seq_cst) + bytes;
  raise_peak(ledger.devices[device], now);
}

// Swap-out of `bytes` (a multiple of kSwapPage) that this process copied to host: the
// slot's pages and the tenant's swapped counter first, then the resident release.
inline void moved_to_host(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  ProcessSlot& process = ledger.processes[slot];
  SlotOperation operation(process);
  ledger.schedule[slot][device].swapped_pages.fetch_add(static_cast<uint32_t>(bytes / kSwapPage),
                                                        std::memory_order_seq_cst);
  ledger.devices[device].swapped.fetch_add(bytes, std::memory_order_seq_cst);
  saturating_sub(ledger.devices[device].used, bytes);
  saturating_sub(process.used[device], bytes);
}

// The end of a swap-in (its bytes already reserved with inside_cap), or the free of an
// allocation that was on host: the swapped counter, then the slot's pages.
inline void left_host(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  ProcessSlot& process = ledger.processes[slot];
  SlotOperation operation(process);
  saturating_sub(ledger.devices[device].swapped, bytes);
  std::atomic<uint32_t>& pages = ledger.schedule[slot][device].swapped_pages;
  const uint32_t n = static_cast<uint32_t>(bytes / kSwapPage);
  uint32_t current = pages.load(std::memory_order_relaxed);
  while (!pages.compare_exchange_weak(current, current > n ? current - n : 0,
                                      std::memory_order_seq_cst, std::memory_order_relaxed)) {
  }
}

// The swap reserve the tenant's live processes hold (TenantLedger.host_reserved, minor 6),
// leaving out slot `except` (kMaxProcesses: none): what the broker counts, and what a process
// subtracts for the others. 0 for a ledger without the field. The words are read first
// (4 KiB, contiguous), a slot's state only where its word is not 0. The sum saturates: the
// words are any process's to write, and two huge ones must not wrap into a small figure.
inline uint64_t live_host_reserved(const TenantLedger& ledger, uint32_t except = kMaxProcesses) {
  if (!ledger_has_host_reserved(ledger.size)) return 0;
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const uint64_t held = ledger.host_reserved[i].load(std::memory_order_relaxed);
    if (held != 0 && i != except &&
        ledger.processes[i].state.load(std::memory_order_relaxed) ==
            static_cast<uint32_t>(SlotState::kLive))
      sum = held > UINT64_MAX - sum ? UINT64_MAX : sum + held;
  }
  return sum;
}

}  // namespace ledger_protocol
}  // namespace fracgpu
