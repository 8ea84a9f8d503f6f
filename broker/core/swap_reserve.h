// SwapReservePlanner: how much pinned, empty host memory each tenant's processes may keep
// ready for a swap-out of its memory on each GPU (DeviceQuota.host_reserve;
// include/fracgpu/tenant_segment.h, "The swap reserve"; docs/design.md "Overcommit and
// swap"). A swap-out into memory pinned ahead copies at the host link's speed, where one that
// pins as it goes is bound by pinning (a few GB/s): with a reserve, the borrower a guarantee
// asks first gives its memory back several times sooner.
//
// Each enforcer tick, after its demands of that tick are made (GuaranteeEnforcer::tick), the
// reserve of a tenant on a GPU is
//  * 0 where it may not swap (swap never), where it borrows nothing there, and everywhere
//    when the node has no host budget;
//  * else a share of what it borrows there: want = used - request (resident bytes above its
//    guarantee), less what an open demand is moving out already (those bytes have their
//    place in the budget as a demand's: reserving for them too would count them twice).
// The wants are served in the enforcer's reclaim order, so that the first asked to move has
// its reserve first: lower priority classes first, within a class the least recently active
// (ProcessSlot.last_active_ns), then the largest borrower (grant - request), then the order
// of the tenants and devices (stable from tick to tick). Each gets min(want, left), from
// `left`: the host budget less what is on host and what open demands will still move there.
// So reserves take only what moves leave. A move is never refused for another tenant's
// reserve: it displaces it (guarantee_enforcer.cpp, book_move), this plan shrinks it, and that
// tenant's processes trim at their swap thread's next look (200 ms).
// Pure decisions over the segments; a quota's host_reserve is stored only when it changes.
// Cost per tick: one pass over the tenants' device quotas and usage counters; with something
// borrowed, a vector kept across ticks (no allocation once it has grown) and the room asked
// of the enforcer (one read of /proc/meminfo, a scan of the slots); the reclaim order
// (a scan of each borrower's slots for its activity, a sort) only when the budget cannot give
// every borrower all it wants.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/memory_arbiter.h"

namespace fracgpu::broker {

class SwapReservePlanner {
 public:
  // What an open demand still moves to host of `member`'s device `quota` that holds `used`
  // resident bytes (used - the demand's target); empty or 0: no demand there.
  using Moving =
      std::function<uint64_t(const ArbiterMember& member, const DeviceQuota& quota, uint64_t used)>;

  explicit SwapReservePlanner(uint64_t host_budget) : host_budget_(host_budget) {}

  // Of the bytes `left`, how many the reserves may hold together (the enforcer's floor on
  // the node's available memory); asked only when some tenant wants a reserve.
  using Room = std::function<uint64_t(uint64_t left)>;

  // Sets the host_reserve of every present device of every tenant in `all`; `left`: host
  // bytes neither on host nor promised to a move (the enforcer's budget after its pass).
  void plan(std::span<const ArbiterMember> all, uint64_t left, const Moving& moving = {},
            const Room& room = {});

  // Whether reserves must follow borrowing at the next ticks: at the last plan a tenant that
  // may swap borrowed, with a host budget (every reserve not 0 is such a tenant's).
  bool active() const { return active_; }

 private:
  struct Candidate {
    DeviceQuota* quota = nullptr;
    const TenantLedger* ledger = nullptr;
    uint32_t priority = 0;
    uint64_t active = 0;    // the tenant's newest last_active_ns (only when ranked)
    uint64_t borrowed = 0;  // grant - request
    uint64_t want = 0;
    uint32_t position = 0;  // tenant index * kMaxDevices + device: the last tie-break
  };
  uint64_t want_of(const ArbiterMember& m, const DeviceQuota& q, const DeviceUsage& u,
                   const Moving& moving) const;
  void rank();

  uint64_t host_budget_;
  std::vector<Candidate> candidates_;  // this tick's borrowers that may swap; capacity kept
  bool active_ = false;
};

}  // namespace fracgpu::broker
