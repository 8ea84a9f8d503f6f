// The plan of the swap reserves (see swap_reserve.h).
#include "core/swap_reserve.h"

#include <algorithm>

#include "core/ledger_ops.h"
#include "core/swap_books.h"

namespace fracgpu::broker {
namespace {

// A store only where the value changes: the processes read the field every 200 ms, and an
// unchanged plan leaves the quota's cache lines clean.
void set_reserve(DeviceQuota& q, uint64_t bytes) {
  if (q.host_reserve.load() != bytes) q.host_reserve.store(bytes);
}

}  // namespace

uint64_t SwapReservePlanner::want_of(const ArbiterMember& m, const DeviceQuota& q,
                                     const DeviceUsage& u, const Moving& moving) const {
  if (host_budget_ == 0 || q.swap_policy.load() != kSwapAllow) return 0;
  const uint64_t used = u.used.load(), request = q.memory_request.load();
  if (used <= request) return 0;
  // Bytes a demand is moving already are the demand's in the budget: they are not reserved
  // for again (the process fills its reserve with them, it does not need a second one).
  const uint64_t away = moving ? std::min(used, moving(m, q, used)) : 0;
  const uint64_t stays = used - away;
  return stays > request ? stays - request : 0;
}

// The enforcer's reclaim order (guarantee_enforcer.cpp): lower classes first, within a class
// the least recently active, then the largest borrower; the position keeps equal candidates
// where they were, so that a plan does not move reserves between them from tick to tick.
void SwapReservePlanner::rank() {
  const TenantLedger* seen = nullptr;  // a tenant's devices come together: one scan each
  uint64_t active = 0;
  for (Candidate& c : candidates_) {
    if (c.ledger != seen) {
      seen = c.ledger;
      active = ledger::last_active(*c.ledger);
    }
    c.active = active;
  }
  std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.active != b.active) return a.active < b.active;
    if (a.borrowed != b.borrowed) return a.borrowed > b.borrowed;
    return a.position < b.position;
  });
}

void SwapReservePlanner::plan(std::span<const ArbiterMember> all, uint64_t left,
                              const Moving& moving, const Room& room) {
  candidates_.clear();
  uint64_t wanted = 0;
  for (std::size_t t = 0; t < all.size(); ++t) {
    const ArbiterMember& m = all[t];
    const uint32_t n = std::min<uint32_t>(m.quota->device_count, kMaxDevices);
    for (uint32_t i = 0; i < n; ++i) {
      DeviceQuota& q = m.quota->devices[i];
      if (q.present != 1) continue;
      const uint64_t want = want_of(m, q, m.ledger->devices[i], moving);
      if (want == 0) {
        set_reserve(q, 0);
        continue;
      }
      const uint64_t grant = q.memory_grant.load(), request = q.memory_request.load();
      candidates_.push_back({&q, m.ledger, q.priority.load(), 0,
                             grant > request ? grant - request : 0, want,
                             static_cast<uint32_t>(t * kMaxDevices + i)});
      wanted = saturating_add(wanted, want);
    }
  }
  active_ = !candidates_.empty();
  if (active_ && room) left = room(left);  // its cost (a procfs read, the slots) only now
  // The order only decides who gets less than it wants: with room for every want, none does.
  if (wanted > left) rank();
  for (const Candidate& c : candidates_) {
    const uint64_t give = std::min(c.want, left);
    set_reserve(*c.quota, give);
    left -= give;
  }
}

}  // namespace fracgpu::broker
