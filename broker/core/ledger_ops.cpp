// Slot bookkeeping and reclaim on a TenantLedger (layout 1.1 rules in tenant_segment.h).
// All accesses are seq_cst: the arguments that make reclaim exact rely on one total
// order of the slot, op_seq and counter updates, and these paths are far too rare for
// weaker orders to matter.
#include "core/ledger_ops.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "fracgpu/ledger_protocol.h"

namespace fracgpu::broker::ledger {
namespace {

SlotState state_of(const ProcessSlot& s) {
  return static_cast<SlotState>(s.state.load());
}

void clear_usage(ProcessSlot& s) {
  for (auto& u : s.used) u.store(0);
  s.last_active_ns.store(0);
}

// Minor 6: the pinned memory a slot's process held for the swap reserve died with it, and a
// new process holds none yet; a ledger of an older layout has no such field.
void clear_host_reserved(TenantLedger& ledger, uint32_t slot) {
  if (ledger_has_host_reserved(ledger.size)) ledger.host_reserved[slot].store(0);
}

void free_slot(TenantLedger& ledger, uint32_t i) {
  ProcessSlot& s = ledger.processes[i];
  clear_usage(s);
  clear_host_reserved(ledger, i);
  s.pid.store(0);
  s.start_time.store(0);
  s.op_seq.store(0);
  s.state.store(static_cast<uint32_t>(SlotState::kFree));
}

// One past the last slot in use. Slot states change only in the broker, so the bound is
// stable while it reclaims; scanning only up to it keeps the snapshot window short.
uint32_t slot_bound(const TenantLedger& ledger) {
  for (uint32_t i = kMaxProcesses; i > 0; --i) {
    if (state_of(ledger.processes[i - 1]) != SlotState::kFree) return i;
  }
  return 0;
}

using SeqSnapshot = std::array<uint64_t, kMaxProcesses>;

// The counter against the sum of a set of slots from one consistent snapshot: the n
// slots slot_at(0..n-1), each counted while counted(slot) holds (re-read at every
// collect). Installs the sum by CAS when they differ.
template <typename SlotAt, typename Counted, typename Value>
UsedCheck snapshot_check(TenantLedger& ledger, std::atomic<uint64_t>& counter, int attempts,
                         uint32_t n, SlotAt slot_at, Counted counted, Value value) {
  std::atomic<uint64_t>& used = counter;
  // op_seq of every counted slot (0 for others); false if one is mid-operation.
  auto collect = [&](SeqSnapshot& out) {
    for (uint32_t k = 0; k < n; ++k) {
      const ProcessSlot& s = ledger.processes[slot_at(k)];
      out[k] = counted(s) ? s.op_seq.load() : 0;
      if (out[k] % 2 != 0) return false;
    }
    return true;
  };
  auto sum = [&] {
    uint64_t total = 0;
    for (uint32_t k = 0; k < n; ++k) {
      const ProcessSlot& s = ledger.processes[slot_at(k)];
      if (counted(s)) total += value(slot_at(k));
    }
    return total;
  };
  SeqSnapshot before, after;  // only the first n entries are ever written or read
  for (int i = 0; i < attempts; ++i) {
    // Sequences, counter, sum, sequences again. Identical even collects mean no live
    // process was inside an operation anywhere between the end of the first collect and
    // the start of the second, so the counter and every slot were constant there: the
    // counter read in that window and the sum describe the same instant. A successful
    // CAS then proves the counter's net change since is zero, so the sum is still right.
    // (Reading the counter before the first collect is NOT safe: an allocation could
    // land before the collect and a free of the same size after the second one, and the
    // CAS would install a sum that counts the allocation but not the free.)
    if (!collect(before)) continue;
    uint64_t seen = used.load();
    const uint64_t truth = sum();
    if (!collect(after) || !std::equal(before.begin(), before.begin() + n, after.begin())) continue;
    const uint64_t at_snapshot = seen;
    if (seen == truth || used.compare_exchange_strong(seen, truth))
      return {true, at_snapshot, truth};
  }
  return {};
}

// What a slot holds in one of the tenant's counters of `device`: resident bytes, or bytes
// on host (minor 3: the slot's swapped pages).
auto resident_of(const TenantLedger& ledger, uint32_t device) {
  return [&ledger, device](uint32_t slot) { return ledger.processes[slot].used[device].load(); };
}
auto swapped_of(const TenantLedger& ledger, uint32_t device) {
  return [&ledger, device](uint32_t slot) {
    return uint64_t{ledger.schedule[slot][device].swapped_pages.load()} * kSwapPage;
  };
}

uint64_t sum_live(const TenantLedger& ledger, uint32_t device, uint32_t bound) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < bound; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (state_of(s) == SlotState::kLive) sum += s.used[device].load();
  }
  return sum;
}

// The process of a Dead slot with an even op_seq was between operations: its used[]
// is exactly what it holds in the tenant counters.
void subtract_exact_share(TenantLedger& ledger, uint32_t slot) {
  ProcessSlot& s = ledger.processes[slot];
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    const uint64_t held = s.used[d].load();
    if (held != 0) saturating_sub(ledger.devices[d].used, held);
    const uint64_t on_host = swapped_of(ledger, d)(slot);  // its host copies died with it
    if (on_host != 0) saturating_sub(ledger.devices[d].swapped, on_host);
  }
}

}  // namespace

void initialize(TenantLedger& ledger) {
  std::memset(static_cast<void*>(&ledger), 0, sizeof(TenantLedger));
  ledger.major = kSegmentMajor;
  ledger.minor = kSegmentMinor;
  ledger.size = sizeof(TenantLedger);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ledger.magic = kLedgerMagic;
}

std::optional<uint32_t> find_live_slot(const TenantLedger& ledger, int32_t pid,
                                       uint64_t start_time) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (state_of(s) == SlotState::kLive && s.pid.load() == pid && s.start_time.load() == start_time)
      return i;
  }
  return std::nullopt;
}

namespace {

// Takes the Free slot `i` for pid/start_time (state Live last: publishes the slot).
void take_slot(TenantLedger& ledger, uint32_t i, int32_t pid, uint64_t start_time) {
  ProcessSlot& s = ledger.processes[i];
  clear_usage(s);
  clear_host_reserved(ledger, i);  // before state Live: the broker never counts a stale reserve
  s.op_seq.store(0);
  for (SlotSchedule& sched : ledger.schedule[i]) {  // minor 2: a fresh process has no grant history
    sched.launched_epoch.store(0);
    sched.drained_epoch.store(0);
    sched.waiting.store(0);
    sched.swapped_pages.store(0);
  }
  s.pid.store(pid);
  s.start_time.store(start_time);
  s.state.store(static_cast<uint32_t>(SlotState::kLive));
}

std::optional<uint32_t> free_slot_index(const TenantLedger& ledger, const ClaimOptions& options) {
  auto free_at = [&](uint32_t i) { return state_of(ledger.processes[i]) == SlotState::kFree; };
  if (options.prefer && *options.prefer < kMaxProcesses && free_at(*options.prefer))
    return *options.prefer;
  for (uint32_t k = 0; k < kMaxProcesses; ++k) {
    const uint32_t i = options.from_top ? kMaxProcesses - 1 - k : k;
    if (free_at(i)) return i;
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint32_t> claim_slot(TenantLedger& ledger, int32_t pid, uint64_t start_time,
                                   const ClaimOptions& options) {
  if (auto existing = find_live_slot(ledger, pid, start_time)) return existing;
  const auto i = free_slot_index(ledger, options);
  if (i) take_slot(ledger, *i, pid, start_time);
  return i;
}

std::optional<uint32_t> claim_placeholder(TenantLedger& ledger) {
  const auto i = free_slot_index(ledger, ClaimOptions{.prefer = std::nullopt, .from_top = true});
  if (i) take_slot(ledger, *i, 0, 0);
  return i;
}

void free_claimed_slot(TenantLedger& ledger, uint32_t slot) {
  if (slot < kMaxProcesses) free_slot(ledger, slot);
}

bool is_placeholder(const ProcessSlot& slot) {
  return state_of(slot) == SlotState::kLive && slot.pid.load() == 0 && slot.start_time.load() == 0;
}

uint32_t release_placeholders(TenantLedger& ledger) {
  uint32_t found = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    if (!is_placeholder(ledger.processes[i])) continue;
    mark_dead(ledger, i);
    ++found;
  }
  if (found > 0) reclaim_dead_slots(ledger, 1000);  // a retry, if needed, is the reconciler's
  return found;
}

void charge(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  if (slot < kMaxProcesses && device < kMaxDevices && bytes > 0)
    ledger_protocol::force_charge(ledger, slot, device, bytes);
}

Booked booked(const TenantLedger& ledger, uint32_t slot, uint32_t device) {
  if (slot >= kMaxProcesses || device >= kMaxDevices) return {};
  return {ledger.processes[slot].used[device].load(), swapped_of(ledger, device)(slot)};
}

Booked recharge(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t used,
                uint64_t swapped) {
  if (slot >= kMaxProcesses || device >= kMaxDevices) return {};
  ProcessSlot& s = ledger.processes[slot];
  DeviceUsage& usage = ledger.devices[device];
  ledger_protocol::SlotOperation operation(s);
  const uint64_t held = s.used[device].load();
  if (used > held) {
    s.used[device].fetch_add(used - held);
    ledger_protocol::raise_peak(usage, usage.used.fetch_add(used - held) + (used - held));
  }
  std::atomic<uint32_t>& pages = ledger.schedule[slot][device].swapped_pages;
  const uint64_t want_pages = std::min<uint64_t>(swapped / kSwapPage, UINT32_MAX);
  const uint64_t have_pages = pages.load();
  if (want_pages > have_pages) {
    pages.fetch_add(static_cast<uint32_t>(want_pages - have_pages));
    usage.swapped.fetch_add((want_pages - have_pages) * kSwapPage);
  }
  return {s.used[device].load(), uint64_t{pages.load()} * kSwapPage};
}

void mark_dead(TenantLedger& ledger, uint32_t slot) {
  if (slot < kMaxProcesses)
    ledger.processes[slot].state.store(static_cast<uint32_t>(SlotState::kDead));
}

uint32_t live_process_count(const TenantLedger& ledger) {
  uint32_t n = 0;
  for (const auto& s : ledger.processes) n += state_of(s) == SlotState::kLive ? 1 : 0;
  return n;
}

uint64_t live_slot_sum(const TenantLedger& ledger, uint32_t device) {
  return sum_live(ledger, device, kMaxProcesses);
}

uint64_t last_active(const TenantLedger& ledger) {
  uint64_t newest = 0;
  for (const ProcessSlot& s : ledger.processes)
    if (state_of(s) == SlotState::kLive)
      newest = std::max<uint64_t>(newest, s.last_active_ns.load());
  return newest;
}

bool recompute_used(TenantLedger& ledger, uint32_t device, int attempts) {
  return device >= kMaxDevices || check_used(ledger, device, attempts).settled;
}

UsedCheck check_used(TenantLedger& ledger, uint32_t device, int attempts) {
  if (device >= kMaxDevices) return {true, 0, 0};
  return snapshot_check(
      ledger, ledger.devices[device].used, attempts, slot_bound(ledger),
      [](uint32_t k) { return k; },
      [](const ProcessSlot& s) { return state_of(s) == SlotState::kLive; },
      resident_of(ledger, device));
}

UsedCheck check_swapped(TenantLedger& ledger, uint32_t device, int attempts) {
  if (device >= kMaxDevices) return {true, 0, 0};
  return snapshot_check(
      ledger, ledger.devices[device].swapped, attempts, slot_bound(ledger),
      [](uint32_t k) { return k; },
      [](const ProcessSlot& s) { return state_of(s) == SlotState::kLive; },
      swapped_of(ledger, device));
}

UsedCheck check_used_of(TenantLedger& ledger, uint32_t device, std::span<const uint32_t> slots,
                        int attempts) {
  if (device >= kMaxDevices) return {true, 0, 0};
  for (uint32_t slot : slots)
    if (slot >= kMaxProcesses) return {};
  return snapshot_check(
      ledger, ledger.devices[device].used, attempts, static_cast<uint32_t>(slots.size()),
      [&](uint32_t k) { return slots[k]; }, [](const ProcessSlot&) { return true; },
      resident_of(ledger, device));
}

UsedCheck check_swapped_of(TenantLedger& ledger, uint32_t device, std::span<const uint32_t> slots,
                           int attempts) {
  if (device >= kMaxDevices) return {true, 0, 0};
  for (uint32_t slot : slots)
    if (slot >= kMaxProcesses) return {};
  return snapshot_check(
      ledger, ledger.devices[device].swapped, attempts, static_cast<uint32_t>(slots.size()),
      [&](uint32_t k) { return slots[k]; }, [](const ProcessSlot&) { return true; },
      swapped_of(ledger, device));
}

bool reclaim_dead_slots(TenantLedger& ledger, int attempts) {
  bool interrupted = false;  // a process died inside an operation
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& s = ledger.processes[i];
    if (state_of(s) != SlotState::kDead) continue;
    if (s.op_seq.load() % 2 == 0) {
      subtract_exact_share(ledger, i);
      free_slot(ledger, i);
    } else {
      interrupted = true;
    }
  }
  if (!interrupted) return true;
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if (!recompute_used(ledger, d, attempts)) return false;
    if (!check_swapped(ledger, d, attempts).settled) return false;
  }
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    if (state_of(ledger.processes[i]) == SlotState::kDead) free_slot(ledger, i);
  }
  return true;
}

bool reserve(TenantLedger& ledger, const TenantQuota& quota, uint32_t slot, uint32_t device,
             uint64_t bytes) {
  return ledger_protocol::try_reserve(quota, ledger, slot, device, bytes) ==
         ReserveOutcome::kReserved;
}

void release(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  ledger_protocol::release(ledger, slot, device, bytes);
}

void lower_grant(DeviceQuota& quota, DeviceUsage& usage, uint64_t target) {
  if (target >= quota.memory_grant.load()) return;
  quota.memory_grant.store(target);
  const uint64_t used = usage.used.load();
  if (used > target) quota.memory_grant.store(std::min(used, quota.memory_limit.load()));
}

}  // namespace fracgpu::broker::ledger
