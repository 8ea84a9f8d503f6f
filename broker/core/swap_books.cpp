// The swap books' bounds and checks (see swap_books.h).
#include "core/swap_books.h"

#include <algorithm>

#include "core/ledger_ops.h"
#include "core/quantity_parser.h"

namespace fracgpu::broker {
namespace {

// Lowers `counter` to at most `most` (a CAS loop: the tenant's processes may move it meanwhile).
void clamp_to(std::atomic<uint64_t>& counter, uint64_t most) {
  uint64_t current = counter.load();
  while (current > most && !counter.compare_exchange_weak(current, most)) {
  }
}

uint64_t pages_bytes(const TenantLedger& l, uint32_t slot, uint32_t device) {
  return uint64_t{l.schedule[slot][device].swapped_pages.load()} * kSwapPage;
}

}  // namespace

uint64_t booked_on_host(const DeviceQuota& quota, const DeviceUsage& usage) {
  return std::min(usage.swapped.load(), quota.host_allowance.load());
}

uint64_t given_reserve(const TenantQuota& quota) {
  uint64_t given = 0;
  for (uint32_t d = 0; d < std::min<uint32_t>(quota.device_count, kMaxDevices); ++d)
    if (quota.devices[d].present == 1)
      given = saturating_add(given, quota.devices[d].host_reserve.load());
  return given;
}

uint64_t booked_host_reserved(const TenantQuota& quota, const TenantLedger& ledger) {
  if (!ledger_has_host_reserved(ledger.size)) return 0;
  const uint64_t given = given_reserve(quota);
  uint64_t held = 0;
  for (uint32_t i = 0; i < kMaxProcesses && held < given; ++i) {
    const uint64_t word = ledger.host_reserved[i].load(std::memory_order_relaxed);
    if (word != 0 && ledger.processes[i].state.load(std::memory_order_relaxed) ==
                         static_cast<uint32_t>(SlotState::kLive))
      held = saturating_add(held, word);
  }
  return std::min(held, given);
}

void allow_moves(DeviceQuota& quota) {
  const uint64_t cap = quota.memory_limit.load();
  if (quota.host_allowance.load() < cap) quota.host_allowance.store(cap);
}

std::vector<SwapFinding> SwapBooks::check(const BooksSubject& s, TimePoint now) {
  TenantState& t = tenants_[s.spec.name];
  if (!t.seen) {
    // A (re)started broker: a demand of its predecessor may have been withdrawn a moment ago
    // (publish resets resident_target).
    t.seen = true;
    t.demand_seen.fill(now);
  }
  slots_.clear();
  for (const WatchedSlot& w : s.watched)
    if (w.slot < kMaxProcesses) slots_.push_back(w.slot);
  std::vector<SwapFinding> out;
  const uint32_t count = static_cast<uint32_t>(std::min(s.spec.devices.size(), kMaxDevices));
  for (uint32_t d = 0; d < count; ++d) on_host(s, t, d, now, out);
  reserve_words(s, out);
  return out;
}

// DeviceUsage.swapped against the registered slots' pages (a consistent snapshot where they
// differ, which installs the sum), then against the allowance; then the allowance follows it.
void SwapBooks::on_host(const BooksSubject& s, TenantState& t, uint32_t d, TimePoint now,
                        std::vector<SwapFinding>& out) {
  DeviceQuota& q = s.quota.devices[d];
  TenantLedger& l = s.ledger;
  DeviceUsage& u = l.devices[d];
  if (q.resident_target.load() != kNoResidentTarget) {
    allow_moves(q);  // the enforcer raised it before publishing; a quota rewritten since not
    t.demand_seen[d] = now;
  }
  uint64_t sum = 0;  // at most 512 * 2^32 pages of 2 MiB: no overflow
  for (uint32_t slot : slots_) sum += pages_bytes(l, slot, d);
  if (sum != u.swapped.load()) {
    const ledger::UsedCheck r = ledger::check_swapped_of(l, d, slots_, kSnapshotAttempts);
    if (r.settled && r.seen != r.truth) {
      out.push_back({d, 0, r.seen > r.truth ? r.seen - r.truth : r.truth - r.seen,
                     "the ledger said " + format_size(r.seen) + " (" + std::to_string(r.seen) +
                         " bytes) on host while its registered processes' slots say " +
                         format_size(r.truth) + "; restored to the slots' sum"});
    }
    if (r.settled) sum = r.truth;
  }
  const uint64_t allowance = q.host_allowance.load();
  if (sum > allowance) {
    // More than the broker ever let it move here: the slots are cut in slot order to the
    // allowance (which process lied is unknown; all are the tenant's), then the counter.
    uint64_t left = allowance;
    int32_t pid = 0;
    for (const WatchedSlot& w : s.watched) {
      if (w.slot >= kMaxProcesses) continue;
      std::atomic<uint32_t>& pages = l.schedule[w.slot][d].swapped_pages;
      const uint64_t keep = std::min<uint64_t>(pages.load(), left / kSwapPage);
      if (keep < pages.load()) {
        pages.store(static_cast<uint32_t>(keep));
        if (pid == 0) pid = w.pid;
      }
      left -= keep * kSwapPage;
    }
    clamp_to(u.swapped, allowance);
    (void)ledger::check_swapped_of(l, d, slots_, kSnapshotAttempts);  // the cut slots' sum
    out.push_back({d, pid, sum - allowance,
                   "the ledger said " + format_size(sum) + " (" + std::to_string(sum) +
                       " bytes) on host, more than the broker let the tenant move there (" +
                       format_size(allowance) + "); cut to it"});
  } else if (u.swapped.load() > allowance) {
    clamp_to(u.swapped, allowance);  // the snapshot did not settle: the counter at least
  }
  // No demand for kMoveHold: nothing more can land, so the allowance follows what is on host
  // down (a swap-in, a free, a process that exited), never up.
  if (now - t.demand_seen[d] >= kMoveHold) clamp_to(q.host_allowance, u.swapped.load());
}

uint64_t SwapBooks::reserve_bound(const TenantQuota& quota) {
  uint64_t caps = 0;
  for (uint32_t d = 0; d < std::min<uint32_t>(quota.device_count, kMaxDevices); ++d)
    if (quota.devices[d].present == 1)
      caps = saturating_add(caps, quota.devices[d].memory_limit.load());
  return caps;
}

// Each registered slot's reserve word against what no process of the tenant can honestly
// hold more of: its caps (see swap_books.h for why not the reserve given).
void SwapBooks::reserve_words(const BooksSubject& s, std::vector<SwapFinding>& out) {
  if (!ledger_has_host_reserved(s.ledger.size)) return;
  const uint64_t most = reserve_bound(s.quota);
  for (const WatchedSlot& w : s.watched) {
    if (w.slot >= kMaxProcesses) continue;
    std::atomic<uint64_t>& word = s.ledger.host_reserved[w.slot];
    const uint64_t held = word.load();
    if (held <= most) continue;
    clamp_to(word, most);
    out.push_back({0, w.pid, held - most,
                   "slot " + std::to_string(w.slot) + " of pid " + std::to_string(w.pid) +
                       " said it holds " + format_size(held) + " (" + std::to_string(held) +
                       " bytes) pinned for the swap reserve, more than the tenant's cap (" +
                       format_size(most) + "); cut to it"});
  }
}

}  // namespace fracgpu::broker
