// GuaranteeEnforcer: keeps every tenant's guaranteed memory obtainable on its GPU,
// whatever others borrowed (docs/design.md "Overcommit and swap").
//
// The arbiter lends a GPU's unguaranteed pool U = capacity - sum(requests) as burst
// grants above requests. When U shrinks under what is already borrowed — a tenant with
// a guarantee was admitted, or a request was raised — the borrowed bytes sit on memory
// that is now promised. Each maintenance tick (100 ms) this class, per GPU:
//  1. settles demands that were met: the borrower's grant comes down to what it now
//     holds (so its memory can only come back through a new burst the arbiter weighs),
//     and the demand is withdrawn;
//  2. takes back idle headroom (grants above used) from every borrower;
//  3. for what is still over-borrowed, asks borrowers — lower classes first, then the
//     largest borrowing — to move memory to host: DeviceQuota.resident_target and a
//     swap_word wake-up (their processes' swap threads act, interpose/core/swap_engine.h),
//     within the node's host-memory budget;
//  4. with idle_after_ns set, moves a tenant that may swap and whose processes have not
//     touched device memory for that long (ProcessSlot.last_active_ns) entirely to host,
//     within the budget: a notebook left open gives its memory back and resumes at its next
//     launch (an idle demand is never reported; it ends when the tenant is active again);
//  5. reports a borrower that cannot (swap "never", budget spent, or the demand not met
//     by its deadline: memory that cannot move, whose bytes the report gives: pinned())
//     and, with reclaim = kill, stops its processes the way the kubelet evicts a pod over
//     its request.
// The host budget counts what is on host and what open demands will still move there.
// After the pass the swap reserves (swap_reserve.h) are planned from what the moves left: a
// move displaces another tenant's reserve rather than being refused for it, and may fill its
// own tenant's reserve where that is larger than what is left (book_move).
// A grant below what is used (a process that brought its memory back while no broker
// answered: it fails open) is raised over it first, so the sums see every borrowed byte —
// as far as the device confirms it (EnforcerConfig::on_device): a forged `used` raises
// nothing.
// Pure decisions over the segments; the clock and the kill are injected. Cost: one pass
// over the tenants' device quotas per tick, and the reserve plan's (no allocation unless
// something is borrowed).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/memory_arbiter.h"
#include "core/swap_reserve.h"

namespace fracgpu::broker {

struct EnforcerConfig {
  uint64_t host_budget = 0;  // bytes all tenants together may hold on host (0 = no swapping)
  bool kill_unswappable = false;
  int64_t grace_ns = 1'000'000'000;    // beyond the copy time a demand may take
  double copy_bytes_per_second = 4e9;  // a conservative host-link figure for the deadline
  int64_t idle_after_ns = 0;           // --swap-idle-after; 0 = idle tenants stay resident
  // The swap reserves are pinned ahead of any need, so they also leave the node this much
  // available memory (MemAvailable): a budget that fits only when little is on host must
  // not starve the node's processes with memory pinned for moves that may never come.
  // Moves themselves are bounded by the budget alone (the operator's promise).
  uint64_t reserve_floor = 0;
  // The node's available memory now (MemAvailable); empty function or nullopt: unknown,
  // then only the budget bounds the reserves.
  std::function<std::optional<uint64_t>()> host_available = {};
  // What the device shows the tenant's registered processes hold on host GPU `gpu` (the
  // NVML audit's latest sample, AuditService::device_bytes). A grant is raised over a
  // ledger's `used` only as far as this confirms: `used` and the slots' `used[]` are the
  // tenant's to write, and a grant raised on its word alone would make other borrowers move
  // (issue 27). nullopt, or no function: no device figure exists (no NVML), and the ledger is
  // taken as it is (docs/security.md says so).
  std::function<std::optional<uint64_t>(const std::string& tenant, uint32_t gpu)> on_device = {};
};

struct SwapDemand {
  std::string tenant;
  uint32_t gpu = 0;
  uint64_t target = 0;  // resident bytes asked for
  int64_t deadline_ns = 0;
  bool reported = false;
  bool idle = false;       // asked because the tenant is idle, not for a guarantee
  uint64_t last_used = 0;  // at the previous tick: a borrower still moving memory gets more time
};

class GuaranteeEnforcer {
 public:
  // Stops every process of the tenant (reclaim = kill); returns how many were signalled.
  using KillTenant = std::function<int(const std::string& tenant)>;

  GuaranteeEnforcer(EnforcerConfig config, KillTenant kill)
      : config_(config), kill_(std::move(kill)), reserves_(config.host_budget) {}

  // One step; true when it changed a grant or a demand (the caller re-notes grants).
  bool tick(std::span<const ArbiterMember> all, const MemoryArbiter& arbiter, int64_t now_ns);

  // Whether the next tick has work whatever else happens: an open demand to follow, idle
  // tenants to watch, or swap reserves to keep with borrowing (a tenant that may swap
  // borrows). Otherwise only a smaller pool (a tenant admitted or its request raised) can
  // create a debt, and the broker runs the tick after such a change (and once a second,
  // which also sees a tenant start borrowing).
  bool busy() const { return !demands_.empty() || config_.idle_after_ns > 0 || reserves_.active(); }
  const std::map<std::string, SwapDemand>& demands() const { return demands_; }
  uint64_t unswappable_reports() const { return unswappable_reports_; }
  // By tenant/gpu: the bytes the tenant held there when it was last reported for memory
  // that could not move (its demand unmet at the deadline after moving all it could, or
  // swap never): contexts and allocations the shim does not back for swapping.
  const std::map<std::string, uint64_t>& pinned() const { return pinned_; }

 private:
  struct Holding {
    const ArbiterMember* member = nullptr;
    DeviceQuota* quota = nullptr;
    DeviceUsage* usage = nullptr;
  };
  // `budget_left`: host bytes not yet on host or promised by a demand of this tick.
  bool enforce_gpu(std::span<const ArbiterMember> all, const MemoryArbiter& arbiter, uint32_t gpu,
                   int64_t now_ns, uint64_t* budget_left);
  bool settle(const Holding& h, int64_t now_ns);
  uint64_t reserve_room(std::span<const ArbiterMember> all, uint64_t budget_left) const;
  void demand(const Holding& h, uint64_t take, int64_t now_ns, uint64_t* budget_left);
  // Books a move of `bytes` of h's tenant to host in the budget; false when it does not fit.
  bool book_move(const Holding& h, uint64_t bytes, uint64_t* budget_left);
  void unswappable(const Holding& h, uint64_t bytes, const std::string& why, int64_t now_ns);
  bool idle_pass(const std::vector<Holding>& on_gpu, int64_t now_ns, uint64_t* budget_left);
  struct IdleState {
    uint64_t last_active = 0;  // the newest ProcessSlot.last_active_ns seen
    bool done = false;         // moved out during this idle period
  };
  std::map<std::string, IdleState> idle_;
  static std::string key(const std::string& tenant, uint32_t gpu);

  EnforcerConfig config_;
  KillTenant kill_;
  std::map<std::string, SwapDemand> demands_;  // by tenant/gpu
  std::map<std::string, int64_t> last_report_ns_;
  std::map<std::string, uint64_t> pinned_;  // see pinned()
  uint64_t unswappable_reports_ = 0;
  SwapReservePlanner reserves_;
  // This tick's moves by tenant (its ledger): what they took of its own reserve. Cleared per
  // tick, capacity kept.
  std::vector<std::pair<const TenantLedger*, uint64_t>> moved_;
};

}  // namespace fracgpu::broker
