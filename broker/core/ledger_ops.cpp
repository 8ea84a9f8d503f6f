// Slot bookkeeping and reconciliation on a TenantLedger. All accesses are seq_cst:
// the correctness argument in tenant_segment.h (a slot never under-states what its
// process holds in DeviceUsage.used) relies on a single total order of the slot and
// counter updates, and these paths are far too rare for weaker orders to matter.
#include "ledger_ops.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace fracgpu::broker::ledger {
namespace {

SlotState state_of(const ProcessSlot& s) { return static_cast<SlotState>(s.state.load()); }

void clear_usage(ProcessSlot& s) {
  for (auto& u : s.used) u.store(0);
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

std::optional<uint32_t> find_live_slot(const TenantLedger& ledger, int32_t pid, uint64_t start_time) {
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (state_of(s) == SlotState::kLive && s.pid.load() == pid && s.start_time.load() == start_time) return i;
  }
  return std::nullopt;
}

std::optional<uint32_t> claim_slot(TenantLedger& ledger, int32_t pid, uint64_t start_time) {
  if (auto existing = find_live_slot(ledger, pid, start_time)) return existing;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& s = ledger.processes[i];
    if (state_of(s) != SlotState::kFree) continue;
    clear_usage(s);
    s.op_seq.store(0);
    s.pid.store(pid);
    s.start_time.store(start_time);
    s.state.store(static_cast<uint32_t>(SlotState::kLive));  // last: publishes the slot
    return i;
  }
  return std::nullopt;
}

void mark_dead(TenantLedger& ledger, uint32_t slot) {
  if (slot < kMaxProcesses) ledger.processes[slot].state.store(static_cast<uint32_t>(SlotState::kDead));
}

void free_dead_slots(TenantLedger& ledger) {
  for (auto& s : ledger.processes) {
    if (state_of(s) != SlotState::kDead) continue;
    clear_usage(s);
    s.op_seq.store(0);
    s.pid.store(0);
    s.start_time.store(0);
    s.state.store(static_cast<uint32_t>(SlotState::kFree));
  }
}

uint32_t live_process_count(const TenantLedger& ledger) {
  uint32_t n = 0;
  for (const auto& s : ledger.processes) n += state_of(s) == SlotState::kLive ? 1 : 0;
  return n;
}

namespace {

// One past the last slot in use. Slot states change only in the broker, so the bound is
// stable while it reconciles; summing only up to it keeps the window between reading the
// counter and the CAS short, which is what lets the CAS win against busy processes.
uint32_t slot_bound(const TenantLedger& ledger) {
  for (uint32_t i = kMaxProcesses; i > 0; --i) {
    if (state_of(ledger.processes[i - 1]) != SlotState::kFree) return i;
  }
  return 0;
}

uint64_t sum_live(const TenantLedger& ledger, uint32_t device, uint32_t bound) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < bound; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (state_of(s) == SlotState::kLive) sum += s.used[device].load();
  }
  return sum;
}

}  // namespace

uint64_t live_slot_sum(const TenantLedger& ledger, uint32_t device) {
  return sum_live(ledger, device, kMaxProcesses);
}

namespace {

// op_seq of every live slot below `bound` into `out`; false if any is mid-operation.
bool collect_quiet(const TenantLedger& ledger, uint32_t bound, std::array<uint64_t, kMaxProcesses>& out) {
  for (uint32_t i = 0; i < bound; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    out[i] = state_of(s) == SlotState::kLive ? s.op_seq.load() : 0;
    if (out[i] % 2 != 0) return false;
  }
  return true;
}

uint64_t saturating_sub(std::atomic<uint64_t>& counter, uint64_t bytes) {
  uint64_t current = counter.load();
  uint64_t next;
  do {
    next = current > bytes ? current - bytes : 0;
  } while (!counter.compare_exchange_weak(current, next));
  return next;
}

}  // namespace

bool release_dead_slot(TenantLedger& ledger, uint32_t slot) {
  if (slot >= kMaxProcesses) return true;
  ProcessSlot& s = ledger.processes[slot];
  if (s.op_seq.load() % 2 != 0) return false;  // died inside an operation: not exact
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if (uint64_t held = s.used[d].load(); held > 0) saturating_sub(ledger.devices[d].used, held);
  }
  clear_usage(s);
  s.op_seq.store(0);
  s.pid.store(0);
  s.start_time.store(0);
  s.state.store(static_cast<uint32_t>(SlotState::kFree));
  return true;
}

bool reconcile_device(TenantLedger& ledger, uint32_t device, int attempts) {
  if (device >= kMaxDevices) return true;
  std::atomic<uint64_t>& used = ledger.devices[device].used;
  const uint32_t bound = slot_bound(ledger);
  std::array<uint64_t, kMaxProcesses> before{}, after{};
  for (int i = 0; i < attempts; ++i) {
    uint64_t seen = used.load();  // before the first collect: later changes fail the CAS
    if (!collect_quiet(ledger, bound, before)) continue;
    const uint64_t truth = sum_live(ledger, device, bound);
    if (!collect_quiet(ledger, bound, after) || before != after) continue;
    if (seen == truth || used.compare_exchange_strong(seen, truth)) return true;
  }
  return false;
}

bool reconcile_all(TenantLedger& ledger, uint32_t device_count, int attempts) {
  bool all = true;
  for (uint32_t d = 0; d < std::min<uint32_t>(device_count, kMaxDevices); ++d) {
    all = reconcile_device(ledger, d, attempts) && all;
  }
  return all;
}

bool reserve(TenantLedger& ledger, const TenantQuota& quota, uint32_t slot, uint32_t device, uint64_t bytes) {
  ProcessSlot& s = ledger.processes[slot];
  DeviceUsage& usage = ledger.devices[device];
  const DeviceQuota& q = quota.devices[device];
  struct Bracket {  // op_seq odd for the duration, as the shim does
    ProcessSlot& slot;
    explicit Bracket(ProcessSlot& p) : slot(p) { slot.op_seq.fetch_add(1); }
    ~Bracket() { slot.op_seq.fetch_add(1); }
  } bracket(s);
  s.used[device].fetch_add(bytes);  // slot first: it must never under-state
  uint64_t u = usage.used.load();
  for (;;) {
    const uint64_t grant = q.memory_grant.load();
    if (u > grant || bytes > grant - u) {
      s.used[device].fetch_sub(bytes);
      return false;
    }
    if (usage.used.compare_exchange_weak(u, u + bytes)) break;
  }
  if (u + bytes > q.memory_grant.load()) {  // the broker lowered the grant meanwhile
    usage.used.fetch_sub(bytes);
    s.used[device].fetch_sub(bytes);
    return false;
  }
  uint64_t peak = usage.peak.load();
  while (peak < u + bytes && !usage.peak.compare_exchange_weak(peak, u + bytes)) {
  }
  return true;
}

void release(TenantLedger& ledger, uint32_t slot, uint32_t device, uint64_t bytes) {
  ledger.processes[slot].op_seq.fetch_add(1);
  ledger.devices[device].used.fetch_sub(bytes);  // counter first, slot second
  ledger.processes[slot].used[device].fetch_sub(bytes);
  ledger.processes[slot].op_seq.fetch_add(1);
}

void lower_grant(DeviceQuota& quota, DeviceUsage& usage, uint64_t target) {
  if (target >= quota.memory_grant.load()) return;
  quota.memory_grant.store(target);
  const uint64_t used = usage.used.load();
  if (used > target) quota.memory_grant.store(std::min(used, quota.memory_limit.load()));
}

}  // namespace fracgpu::broker::ledger
