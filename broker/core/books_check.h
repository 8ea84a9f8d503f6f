// The broker's cross-check of what a tenant can write (issue 12, item 1): every
// maintenance tick (100 ms) each tenant's quota and ledger are compared with what the
// broker itself knows, repaired, and a tenant whose files were wrong is flagged: its
// burst requests are refused for kFlagDuration after the last inconsistency.
//
//  quota   memory_limit, memory_request, compute_weight, compute_ceiling_pct, priority,
//          context_footprint, uuid, host_index, present and device_count equal the
//          TenantSpec the broker published; memory_grant equals the grant the broker
//          last wrote (note_grants() is called after every broker write: create/update,
//          burst, reclaim) and lies in [request, limit]. On a mismatch the caller's
//          republish() rewrites the quota from the spec (TenantSegments::publish) and the
//          grant is put back (lowered race-safely, ledger::lower_grant). grant_word and
//          the burst-guard fields are NOT compared: the compute service keeps its record
//          of them inside the quota itself, so there is nothing cheap to compare with;
//          they are protected only by the quota being read-only to tenants.
//  ledger  a slot the broker watches (ProcessTracker) must be Live with the watched pid
//          and start time (else restored); DeviceUsage.used must equal the sum of the
//          used[] of those slots, from a consistent snapshot (ledger::check_used_of, which
//          installs the sum); a slot stuck inside an operation (op_seq odd and unchanged)
//          for kStuckTicks ticks is reported too, since it keeps that snapshot from
//          settling. Every tenant's 512 slots are scanned in turn (below): any other slot
//          not Free is forged (with no reclaim pending there are no Dead slots of real
//          processes) and is freed WITHOUT subtracting its used[] (values the tenant wrote
//          must never lower its counter). Skipped while the tenant has Dead slots
//          awaiting reclaim.
//  swap    the tenant's words about its memory on host and its swap reserve, against the
//          broker's own records (swap_books.h): DeviceUsage.swapped against the registered
//          slots' swapped pages and the quota's host_allowance, each registered slot's
//          host_reserved against the reserve given. Every tick, like the ledger's counter;
//          skipped like it while Dead slots await reclaim. Violations of kind "swap".
// Residual risk: a tenant that rewrites DeviceUsage.used AND its slots' used[]
// consistently (both lowered by the same amount) passes this check; only the NVML audit
// (usage_audit.h), which sees the driver's real per-process usage, catches that.
//
// What runs every tick and what runs slowly (the tick's cost must not grow with
// tenants x 512 slots). Nothing here trusts a tenant-written "changed" flag: the quota
// and ledger pages are writable by the tenant's processes, so a flag they could clear is
// no evidence. Instead, every tick, for EVERY tenant:
//   - the quota's compared fields against the broker's record (a few loads per device,
//     no allocation; strings are built only when something differs);
//   - each registered slot's state/pid/start time (O(registered processes));
//   - DeviceUsage.used against the plain sum of the registered slots' used[]; only when
//     they differ (an operation in flight, or tampering) is the consistent snapshot
//     (ledger::check_used_of) taken, which settles it and repairs a real difference.
//     A tenant with no registered process must read 0, which costs one load per device.
// Slowly: the scan of all 512 slots for forged ones, tenants taking turns, at most
// kFullScanSlotsPerTick slots per tick: each tenant every kFullScanEvery ticks (10 s)
// up to 200 tenants, every tenants/2 ticks beyond (50 s at 1,000). That is safe to
// slow down because a forged slot cannot lower the tenant's counter unnoticed: the
// counter is checked every tick against the broker's own slots only, and a forged
// Dead slot that a reclaim subtracted shows there within 100 ms (repaired, flagged); a
// forged slot otherwise only uses up the tenant's own slots.
// Cost per tenant and tick: about 20 loads and compares per device plus the registered
// slots; a consistent snapshot only for tenants whose counters were moving; at 1,000
// tenants about 0.5 ms per tick, half a microsecond a tenant (bench/broker_scale_bench.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/gpu_inventory.h"
#include "core/tenant_spec.h"
#include "core/usage_audit.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

class SwapBooks;

// What the broker knows about one registered process (ProcessTracker::Watched).
struct WatchedSlot {
  uint32_t slot = 0;
  int32_t pid = 0;
  uint64_t start_time = 0;
};

struct BooksSubject {
  const TenantSpec& spec;
  TenantQuota& quota;
  TenantLedger& ledger;
  std::span<const WatchedSlot> watched;  // by slot, ascending; must outlive the check
  bool reclaim_pending = false;          // LedgerReconciler has Dead slots queued
  std::function<void()> republish;       // rewrite the quota from the spec
};

class BooksCheck {
 public:
  static constexpr std::chrono::seconds kFlagDuration{60};
  static constexpr int kSnapshotAttempts = 8;
  static constexpr int kStuckTicks = 20;      // 2 s at 100 ms
  static constexpr int kFullScanEvery = 100;  // 10 s at 100 ms, for up to 200 tenants
  static constexpr std::size_t kFullScanSlotsPerTick = 1024;

  explicit BooksCheck(const GpuInventory& gpus);
  ~BooksCheck();

  // The grants the broker has just written into this tenant's quota.
  void note_grants(const std::string& tenant, const TenantQuota& quota);
  // Quota and ledger of one tenant; returns what was wrong (already repaired).
  std::vector<Violation> check(const BooksSubject& subject,
                               std::chrono::steady_clock::time_point now);
  std::vector<Violation> check_quota(const BooksSubject& subject,
                                     std::chrono::steady_clock::time_point now);
  // full_scan: also look at every slot that is not the broker's (forged ones); check()
  // does that for each tenant once per full_scan_period() ticks, tenants taking turns.
  std::vector<Violation> check_ledger(const BooksSubject& subject,
                                      std::chrono::steady_clock::time_point now, bool full_scan);

  // True (with the sentence for the refusal) while the tenant is flagged.
  bool burst_refused(const std::string& tenant, std::chrono::steady_clock::time_point now,
                     std::string* why) const;
  // Seconds left of the tenant's flag (0 when not flagged).
  int64_t flag_seconds_left(const std::string& tenant,
                            std::chrono::steady_clock::time_point now) const;
  void forget(const std::string& tenant);
  // Ticks between two full scans of one tenant, for the tenants known now.
  uint64_t full_scan_period() const;

 private:
  struct TenantState {
    std::vector<uint64_t> grants;  // by quota device index
    bool grants_known = false;
    std::chrono::steady_clock::time_point flagged_until{};
    std::map<uint32_t, std::pair<uint64_t, int>> odd_slots;  // slot -> (op_seq, ticks seen)
    uint64_t ticks = 0;
    uint64_t scan_offset = 0;  // spreads the tenants' full scans over the period
    bool offset_known = false;
  };
  TenantState& state_of(const std::string& tenant);
  std::vector<Violation> quota_of(const BooksSubject& s, TenantState& t,
                                  std::chrono::steady_clock::time_point now);
  std::vector<Violation> ledger_of(const BooksSubject& s, TenantState& t,
                                   std::chrono::steady_clock::time_point now, bool full_scan);
  Violation violation(const BooksSubject& s, uint32_t device, ViolationKind kind, int32_t pid,
                      uint64_t bytes, std::string action, std::string detail) const;
  void flag(TenantState& t, std::chrono::steady_clock::time_point now);

  const GpuInventory& gpus_;
  std::unordered_map<std::string, TenantState> tenants_;
  std::unique_ptr<SwapBooks> swap_;
};

}  // namespace fracgpu::broker
