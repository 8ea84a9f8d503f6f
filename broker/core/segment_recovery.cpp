// rebuild_ledger: sanitise the slots, recompute the counters, stamp the header (magic
// last, like ledger::initialize, so a reader never sees a valid magic over a half-built
// ledger).
#include "core/segment_recovery.h"

#include <cstring>

#include "core/ledger_ops.h"

namespace fracgpu::broker {
namespace {

constexpr int kSnapshotAttempts = 1000;
// Counters above this (2^50 bytes, 1 PiB) cannot be real on any GPU: garbage.
constexpr uint64_t kImplausible = uint64_t{1} << 50;

bool plausible_live_slot(const ProcessSlot& s) {
  if (static_cast<SlotState>(s.state.load()) != SlotState::kLive || s.pid.load() <= 0) return false;
  for (const auto& used : s.used)
    if (used.load() > kImplausible) return false;
  return true;
}

void clear_slot(TenantLedger& ledger, uint32_t i) {
  std::memset(static_cast<void*>(&ledger.processes[i]), 0, sizeof(ProcessSlot));
  std::memset(static_cast<void*>(&ledger.schedule[i]), 0, sizeof(ledger.schedule[i]));
}

// Minor 6: the rebuilt header says the ledger carries host_reserved (the broker maps it at
// its full size; a file of an older layout was extended with zeros). A live process keeps
// what it holds for the swap reserve (it stores the value again after its re-registration);
// any other slot holds nothing, and a figure no host can pin is garbage.
void sanitise_host_reserved(TenantLedger& ledger, uint32_t i, bool live) {
  std::atomic<uint64_t>& held = ledger.host_reserved[i];
  if (!live || held.load() > kImplausible) held.store(0);
}

bool slot_is_zero(const TenantLedger& ledger, uint32_t i) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&ledger.processes[i]);
  for (std::size_t k = 0; k < sizeof(ProcessSlot); ++k)
    if (bytes[k] != 0) return false;
  return true;
}

// used/swapped from the live slots; a best-effort plain sum where processes kept the
// snapshot from settling (the books check corrects it on its next tick).
bool recompute_counters(TenantLedger& ledger, uint32_t d) {
  DeviceUsage& u = ledger.devices[d];
  bool settled = true;
  if (!ledger::check_used(ledger, d, kSnapshotAttempts).settled) {
    u.used.store(ledger::live_slot_sum(ledger, d));
    settled = false;
  }
  if (!ledger::check_swapped(ledger, d, kSnapshotAttempts).settled) settled = false;
  if (u.swapped.load() > kImplausible) u.swapped.store(0);
  if (u.peak.load() > kImplausible || u.peak.load() < u.used.load()) u.peak.store(u.used.load());
  if (u.oom_events.load() > kImplausible) u.oom_events.store(0);
  if (u.burst_requests.load() > kImplausible) u.burst_requests.store(0);
  u.waiting.store(0);  // monitoring only; the gate's waiters are counted per slot
  return settled;
}

}  // namespace

LedgerRebuild rebuild_ledger(TenantLedger& ledger) {
  LedgerRebuild out;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const bool live = plausible_live_slot(ledger.processes[i]);
    if (live) {
      ++out.live_slots;
    } else if (!slot_is_zero(ledger, i)) {
      clear_slot(ledger, i);
      ++out.cleared_slots;
    }
    sanitise_host_reserved(ledger, i, live);
  }
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if (!recompute_counters(ledger, d)) out.settled = false;
  }
  std::memset(static_cast<void*>(ledger.reserved), 0, sizeof ledger.reserved);
  ledger.major = kSegmentMajor;
  ledger.minor = kSegmentMinor;
  ledger.size = sizeof(TenantLedger);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ledger.magic = kLedgerMagic;
  return out;
}

}  // namespace fracgpu::broker
