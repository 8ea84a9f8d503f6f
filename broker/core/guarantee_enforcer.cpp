// The decisions of GuaranteeEnforcer (see guarantee_enforcer.h).
#include "core/guarantee_enforcer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <vector>

#include "core/ledger_ops.h"
#include "core/quantity_parser.h"
#include "core/swap_books.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/ledger_protocol.h"

namespace fracgpu::broker {
namespace {

constexpr int64_t kReportEveryNs = 60'000'000'000;  // one line per borrower per minute

uint64_t borrowed(const DeviceQuota& q) {
  const uint64_t grant = q.memory_grant.load(), request = q.memory_request.load();
  return grant > request ? grant - request : 0;
}

// A grant below what is used: a process brought its memory back from host while no broker
// answered (interpose/core/swap_engine.cpp, reserve_back: it fails open), or charged memory
// that already existed past its grant (a pool's rounding). That memory is on the device:
// the grant is raised over it (never above the limit) so that the sums below count what is
// really borrowed, and a guarantee it breaks is enforced again. Raising a grant is always
// safe for racing processes. `used` is the tenant's word: only what the device confirms
// (`confirmed`, NVML's figure for its registered processes) is covered; a ledger that says
// more than the device shows raises nothing, so it moves no other tenant (issue 27).
bool cover_used(DeviceQuota& q, const DeviceUsage& u, std::optional<uint64_t> confirmed) {
  const uint64_t used = u.used.load(), grant = q.memory_grant.load();
  const uint64_t raised = std::min({used, q.memory_limit.load(), confirmed.value_or(UINT64_MAX)});
  if (raised <= grant) return false;
  q.memory_grant.store(raised);
  return true;
}

// The report's figure: `bytes` as a size and exactly.
std::string sized(uint64_t bytes) {
  return format_size(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

void publish_target(DeviceQuota& q, uint64_t target) {
  // The broker's record of what may be on host first (swap_books.h): a move that starts at
  // once is never over it, not even across a broker restart.
  if (target != kNoResidentTarget) allow_moves(q);
  q.resident_target.store(target);
  q.swap_word.fetch_add(1);
  futex_wake_all(q.swap_word);
}

}  // namespace

std::string GuaranteeEnforcer::key(const std::string& tenant, uint32_t gpu) {
  return tenant + "/" + std::to_string(gpu);
}

bool GuaranteeEnforcer::tick(std::span<const ArbiterMember> all, const MemoryArbiter& arbiter,
                             int64_t now_ns) {
  // One pass: the GPUs in use, in order (a node has a handful: a sorted vector, no tree
  // per tick), and what is on host memory now.
  // What open demands of earlier ticks will still move is promised to the budget too: a
  // demand still copying has not reached `swapped` yet.
  // `swapped` is the tenant's own word: it counts only up to the broker's record of what that
  // tenant was let move (booked_on_host), and the sum saturates (swap_books.h).
  std::vector<uint32_t> gpus;
  uint64_t on_host = 0;
  for (const auto& m : all)
    for (uint32_t i = 0; i < std::min<uint32_t>(m.quota->device_count, kMaxDevices); ++i) {
      const DeviceUsage& u = m.ledger->devices[i];
      on_host = saturating_add(on_host, booked_on_host(m.quota->devices[i], u));
      if (m.quota->devices[i].present != 1) continue;
      const uint32_t g = m.quota->devices[i].host_index;
      if (!demands_.empty())
        if (auto d = demands_.find(key(m.name, g)); d != demands_.end())
          on_host = saturating_add(
              on_host, u.used.load() > d->second.target ? u.used.load() - d->second.target : 0);
      auto at = std::lower_bound(gpus.begin(), gpus.end(), g);
      if (at == gpus.end() || *at != g) gpus.insert(at, g);
    }
  // One host budget for every GPU and both kinds of demand of this tick. The reserves are
  // not in it: they get what the moves leave (book_move, swap_reserve.h).
  uint64_t budget_left = config_.host_budget > on_host ? config_.host_budget - on_host : 0;
  bool changed = false;
  moved_.clear();
  for (uint32_t gpu : gpus) changed |= enforce_gpu(all, arbiter, gpu, now_ns, &budget_left);
  // Demands of tenants (or GPUs) that are gone.
  for (auto it = demands_.begin(); it != demands_.end();) {
    const bool present = std::any_of(all.begin(), all.end(), [&](const ArbiterMember& m) {
      return m.name == it->second.tenant;
    });
    it = present ? std::next(it) : demands_.erase(it);
  }
  for (auto it = pinned_.begin(); it != pinned_.end();) {
    const bool present = std::any_of(all.begin(), all.end(), [&](const ArbiterMember& m) {
      return it->first.starts_with(m.name + "/");
    });
    it = present ? std::next(it) : pinned_.erase(it);
  }
  // The reserves from what this tick's moves left (a demand withdrawn in this pass still
  // counts as moving until the next tick: reserves grow a tick late, never too early).
  SwapReservePlanner::Moving moving;
  if (!demands_.empty())
    moving = [this](const ArbiterMember& m, const DeviceQuota& q, uint64_t used) -> uint64_t {
      auto d = demands_.find(key(m.name, q.host_index));
      return d != demands_.end() && used > d->second.target ? used - d->second.target : 0;
    };
  reserves_.plan(all, budget_left, moving, [&](uint64_t left) { return reserve_room(all, left); });
  return changed;
}

// What the reserves may hold together: what the moves left of the budget, and no more than
// keeps the node's available memory above the floor. The reserves held now are pinned, not
// available: they count as room of their own (a node below the floor shrinks them).
uint64_t GuaranteeEnforcer::reserve_room(std::span<const ArbiterMember> all,
                                         uint64_t budget_left) const {
  if (budget_left == 0 || !config_.host_available) return budget_left;
  const std::optional<uint64_t> available = config_.host_available();
  if (!available) return budget_left;
  // The reserves' words count up to what the broker gave (swap_books.h), summed saturating.
  uint64_t held = 0;
  for (const auto& m : all) held = saturating_add(held, booked_host_reserved(*m.quota, *m.ledger));
  const uint64_t room = saturating_add(held, *available);
  return std::min(budget_left, room > config_.reserve_floor ? room - config_.reserve_floor : 0);
}

// A met demand: the grant comes down to what the borrower now holds, the demand goes.
// A demand past its deadline: the memory could not move.
bool GuaranteeEnforcer::settle(const Holding& h, int64_t now_ns) {
  auto it = demands_.find(key(h.member->name, h.quota->host_index));
  if (it == demands_.end()) return false;
  SwapDemand& d = it->second;
  const uint64_t used = h.usage->used.load();
  // A deadline is for a borrower that stopped moving memory, not for a slow copy: every
  // tick that saw progress pushes it out by the grace period.
  // An idle tenant's demand has no one waiting on it: it gets four times the patience.
  const int64_t grace = d.idle ? 4 * config_.grace_ns : config_.grace_ns;
  if (used < d.last_used) d.deadline_ns = std::max(d.deadline_ns, now_ns + grace);
  d.last_used = used;
  if (d.idle && (used <= d.target || now_ns >= d.deadline_ns)) {
    // What could move has moved; memory that cannot (pools, the application's own VMM,
    // contexts) stays, which is no fault of an idle tenant's.
    ledger::lower_grant(*h.quota, *h.usage, std::max(h.quota->memory_request.load(), used));
    publish_target(*h.quota, kNoResidentTarget);
    idle_[it->first].done = true;
    spdlog::info("tenant {}: idle, {} of its memory on GPU {} is on host now", d.tenant,
                 format_size(h.usage->swapped.load()), d.gpu);
    demands_.erase(it);
    return true;
  }
  if (used <= d.target) {
    ledger::lower_grant(*h.quota, *h.usage, std::max(h.quota->memory_request.load(), used));
    publish_target(*h.quota, kNoResidentTarget);
    spdlog::info("tenant {}: {} of its memory on GPU {} is on host now; its grant is {}", d.tenant,
                 format_size(h.usage->swapped.load()), d.gpu,
                 format_size(h.quota->memory_grant.load()));
    demands_.erase(it);
    return true;
  }
  if (now_ns >= d.deadline_ns && !d.reported) {
    // Nothing moved for the grace period: every process moved what it could, so what the
    // tenant still holds there is what cannot move.
    d.reported = true;
    pinned_[it->first] = used;
    unswappable(h, used - d.target,
                "did not move it to host memory in time: " + sized(used) +
                    " of its memory there is pinned (contexts, and allocations fracgpu does not "
                    "back for swapping)",
                now_ns);
  }
  return false;
}

void GuaranteeEnforcer::unswappable(const Holding& h, uint64_t bytes, const std::string& why,
                                    int64_t now_ns) {
  ++unswappable_reports_;
  const std::string& name = h.member->name;
  auto [last, first] = last_report_ns_.try_emplace(name, now_ns);
  if (first || now_ns - last->second >= kReportEveryNs || config_.kill_unswappable) {
    last->second = now_ns;
    spdlog::warn("tenant {} borrows {} on GPU {} that a guaranteed tenant needs, and {}{}", name,
                 format_size(bytes), h.quota->host_index, why,
                 config_.kill_unswappable ? ": stopping its processes (--reclaim kill)"
                                          : " (with --reclaim kill the broker would stop it)");
  }
  if (config_.kill_unswappable && kill_) kill_(name);
}

void GuaranteeEnforcer::demand(const Holding& h, uint64_t take, int64_t now_ns,
                               uint64_t* budget_left) {
  const uint64_t used = h.usage->used.load();
  const std::string k = key(h.member->name, h.quota->host_index);
  if (h.quota->swap_policy.load() != kSwapAllow) {
    pinned_[k] = used;
    unswappable(
        h, take,
        "its memory may not move (swap never): all " + sized(used) + " of it there is pinned",
        now_ns);
    return;
  }
  const uint64_t left = *budget_left;
  if (!book_move(h, take, budget_left)) {
    unswappable(h, take,
                "the node's host-memory budget for swapped memory is spent (" + sized(left) +
                    " of it left)",
                now_ns);
    return;
  }
  last_report_ns_.erase(h.member->name);  // a later refusal is news again: reported at once
  SwapDemand d;
  d.tenant = h.member->name;
  d.gpu = h.quota->host_index;
  d.target = used - take;
  d.last_used = used;
  d.deadline_ns =
      now_ns + config_.grace_ns +
      static_cast<int64_t>(static_cast<double>(take) / config_.copy_bytes_per_second * 1e9);
  publish_target(*h.quota, d.target);
  spdlog::info("tenant {}: asked to move {} on GPU {} to host memory (a guarantee needs it)",
               d.tenant, format_size(take), d.gpu);
  demands_[k] = d;
}

// The budget left is the host budget less what is on host and what open demands will still
// move there. The swap reserves are not taken out of it: reserves get only what moves leave
// (swap_reserve.h), so a move displaces another tenant's reserve rather than being refused
// for it — a guarantee outranks another tenant's readiness to move faster, and a reserve
// for memory on one GPU must not stop a guarantee on another; the plan after this pass
// shrinks that reserve, and its processes unpin it at their next look (200 ms).
// The tenant's own reserve is pinned memory its move fills without pinning more: where it is
// larger than what is left (the budget went to others' moves since it was given), the move
// may take up to it, less what its earlier moves of this tick took. The budget left never
// counts those bytes twice: they come out of it like any move's, down to 0.
bool GuaranteeEnforcer::book_move(const Holding& h, uint64_t bytes, uint64_t* budget_left) {
  const TenantLedger* ledger = h.member->ledger;
  auto mine =
      std::find_if(moved_.begin(), moved_.end(), [&](const auto& e) { return e.first == ledger; });
  const uint64_t taken = mine != moved_.end() ? mine->second : 0;
  if (bytes > *budget_left) {
    // Read only here: a demand that fits the budget needs no scan of the reserve words, which
    // count up to the reserve the broker gave the tenant (swap_books.h).
    const uint64_t held = booked_host_reserved(*h.member->quota, *ledger);
    if (bytes > (held > taken ? held - taken : 0)) return false;
  }
  *budget_left -= std::min(bytes, *budget_left);
  if (mine != moved_.end()) {
    mine->second += bytes;
  } else {
    moved_.emplace_back(ledger, bytes);
  }
  return true;
}

bool GuaranteeEnforcer::idle_pass(const std::vector<Holding>& on_gpu, int64_t now_ns,
                                  uint64_t* budget_left) {
  bool changed = false;
  for (const Holding& h : on_gpu) {
    const std::string k = key(h.member->name, h.quota->host_index);
    const uint64_t active = ledger::last_active(*h.member->ledger);
    IdleState& st = idle_[k];
    auto open = demands_.find(k);
    if (active != st.last_active) {  // it ran since: a new idle period starts
      st = IdleState{active, false};
      if (open != demands_.end() && open->second.idle) {
        publish_target(*h.quota, kNoResidentTarget);
        demands_.erase(open);
        changed = true;
      }
      continue;
    }
    const uint64_t used = h.usage->used.load();
    if (st.done || active == 0 || open != demands_.end() || used == 0 ||
        h.quota->swap_policy.load() != kSwapAllow ||
        now_ns - static_cast<int64_t>(active) < config_.idle_after_ns)
      continue;
    if (!book_move(h, used, budget_left)) continue;  // stays resident: the budget is spent
    SwapDemand d;
    d.tenant = h.member->name;
    d.gpu = h.quota->host_index;
    d.target = 0;
    d.idle = true;
    d.last_used = used;
    d.deadline_ns =
        now_ns + 4 * config_.grace_ns +
        static_cast<int64_t>(static_cast<double>(used) / config_.copy_bytes_per_second * 1e9);
    publish_target(*h.quota, 0);
    spdlog::info("tenant {}: idle for {:.0f} s on GPU {}: moving its memory to host", d.tenant,
                 static_cast<double>(now_ns - static_cast<int64_t>(active)) / 1e9, d.gpu);
    demands_[k] = d;
    changed = true;
  }
  return changed;
}

bool GuaranteeEnforcer::enforce_gpu(std::span<const ArbiterMember> all,
                                    const MemoryArbiter& arbiter, uint32_t gpu, int64_t now_ns,
                                    uint64_t* budget_left) {
  // One pass over the tenants: who is on the GPU, what is guaranteed and what is borrowed
  // there (MemoryArbiter's sums, folded in; an idle broker with 1,000 tenants pays this
  // pass and nothing else).
  std::vector<Holding> on_gpu;
  on_gpu.reserve(all.size());
  uint64_t guaranteed = 0, borrowed_sum = 0;
  bool changed = false;
  for_each_device_on(all, gpu, [&](const ArbiterMember& m, DeviceQuota& q, DeviceUsage& u) {
    on_gpu.push_back({&m, &q, &u});
    if (u.used.load() > q.memory_grant.load())  // rare: the port is asked only then
      changed |=
          cover_used(q, u, config_.on_device ? config_.on_device(m.name, gpu) : std::nullopt);
    guaranteed += q.memory_request.load();
    borrowed_sum += borrowed(q);
  });
  if (!demands_.empty())  // settling changes grants: the sums are taken again below
    for (const Holding& h : on_gpu) changed |= settle(h, now_ns);
  const uint64_t cap = arbiter.capacity(gpu);
  const uint64_t pool = cap > guaranteed ? cap - guaranteed : 0;
  auto over = [&] {
    const uint64_t sum = arbiter.borrowed_on(all, gpu, nullptr);
    return sum > pool ? sum - pool : 0;
  };
  uint64_t excess = changed ? over() : (borrowed_sum > pool ? borrowed_sum - pool : 0);
  if (config_.idle_after_ns > 0) changed |= idle_pass(on_gpu, now_ns, budget_left);
  if (excess == 0) {
    if (demands_.empty()) return changed;
    for (const Holding& h : on_gpu) {  // nothing is owed any more: withdraw open demands
      auto it = demands_.find(key(h.member->name, gpu));
      if (it == demands_.end() || it->second.idle) continue;
      publish_target(*h.quota, kNoResidentTarget);
      demands_.erase(it);
      changed = true;
    }
    return changed;
  }
  for (const Holding& h : on_gpu)  // idle headroom first: it costs nobody anything
    ledger::lower_grant(*h.quota, *h.usage,
                        std::max(h.quota->memory_request.load(), h.usage->used.load()));
  excess = over();
  changed = true;
  if (excess == 0) return changed;
  // What open demands will free counts already.
  for (const Holding& h : on_gpu) {
    auto it = demands_.find(key(h.member->name, gpu));
    if (it == demands_.end()) continue;
    const uint64_t used = h.usage->used.load();
    const uint64_t coming = used > it->second.target ? used - it->second.target : 0;
    excess = excess > coming ? excess - coming : 0;
  }
  std::vector<Holding> victims;
  for (const Holding& h : on_gpu)
    if (borrowed(*h.quota) > 0 && !demands_.count(key(h.member->name, gpu))) victims.push_back(h);
  // Best-effort (low) before normal before high; within a class the least recently active
  // first (its memory is the least likely to be needed soon), then the largest borrower.
  // The activity stamp is written by the tenant's own processes: a tenant that lies about it
  // can only change its place among borrowers of its class, never escape a demand.
  struct Ranked {
    Holding holding;
    uint32_t priority;
    uint64_t active;
    uint64_t borrowed;
  };
  std::vector<Ranked> ranked;
  for (const Holding& h : victims)
    ranked.push_back(
        {h, h.quota->priority.load(), ledger::last_active(*h.member->ledger), borrowed(*h.quota)});
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.active != b.active) return a.active < b.active;
    return a.borrowed > b.borrowed;
  });
  victims.clear();
  for (const Ranked& r : ranked) victims.push_back(r.holding);
  for (const Holding& h : victims) {
    if (excess == 0) break;
    const uint64_t take = std::min(excess, borrowed(*h.quota));
    demand(h, take, now_ns, budget_left);
    excess -= take;
  }
  return changed;
}

}  // namespace fracgpu::broker
