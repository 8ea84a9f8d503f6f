// The swap books: what the broker counts of a tenant's memory on host and of its swap reserve
// (issue 27; docs/security.md "What a tenant writes or claims"). DeviceUsage.swapped,
// SlotSchedule.swapped_pages and TenantLedger.host_reserved are words the tenant's own
// processes write. A tenant may limit itself with them, never another tenant or the node: so
// every figure that decides for others reads them through the bounds here, with saturating
// sums (a forged 2^64 - 256 MiB must not wrap the host budget's sum into room), and the books
// check cuts a ledger that says more than the broker's record (a violation of kind "swap").
//
// The broker's records (tenant_segment.h, minor 6 and 7):
//  * on host: DeviceQuota.host_allowance. Raised to the tenant's cap on the GPU before the
//    guarantee enforcer publishes a resident_target there (allow_moves: a move takes whole
//    allocations and may exceed what was asked, never the cap); held there while the demand
//    is open and for kMoveHold after it (an allocation being copied when the demand was
//    withdrawn still lands); then it follows what the ledger says down, never up. A tenant
//    the broker never asked to move memory has an allowance of 0: nothing it writes counts.
//  * the swap reserve: DeviceQuota.host_reserve, the pinned memory the broker lets the tenant
//    hold ready. For decisions (a move that fills the tenant's own reserve past the budget,
//    the reserves' room) the live slots' words count at most the reserve given now, summed
//    over the tenant's GPUs (booked_host_reserved). That bound errs only towards refusing: it
//    is below what processes hold only while they trim or keep their reserve for a move. It
//    is not the bound a word is flagged by: a process keeps its reserve while a demand is open
//    (the plan meanwhile gives less), and trims only whole free slabs, so a slab that holds a
//    host copy keeps its empty rest pinned, above the reserve given, until the copy comes back
//    (Overcommit.AnIdleTenantGivesItsMemoryBackAndResumesAtItsNextCopy held 1 GiB against
//    832 MiB given for seconds). A process holds at most its own swappable resident bytes,
//    so a registered slot's word is cut (and flagged) past the tenant's caps summed over its
//    GPUs: a bound that never ratchets down under an honest process.
// Cost per tick and tenant with registered processes: per device one load per registered
// slot (their swapped pages, summed) and a few loads of the quota; per registered slot one
// load of its reserve word; a consistent snapshot (ledger_ops) only where the sum and the
// counter disagree. No allocation unless something is found.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/books_check.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

inline uint64_t saturating_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

// What the broker counts of the tenant on host on one GPU: min(swapped, host_allowance).
uint64_t booked_on_host(const DeviceQuota& quota, const DeviceUsage& usage);
// The swap reserve the broker gives the tenant now: the host_reserve of its present GPUs.
uint64_t given_reserve(const TenantQuota& quota);
// The reserve the tenant's live processes hold as the broker counts it: the saturating sum
// of their host_reserved words, at most given_reserve (0 for a ledger without the words).
uint64_t booked_host_reserved(const TenantQuota& quota, const TenantLedger& ledger);
// Before a resident_target other than kNoResidentTarget is published: moves there may take
// up to the tenant's cap (never lowers the allowance).
void allow_moves(DeviceQuota& quota);

// One finding of the swap books, already corrected; BooksCheck turns it into a Violation.
struct SwapFinding {
  uint32_t device = 0;  // index into the tenant's quota devices
  int32_t pid = 0;
  uint64_t bytes = 0;  // by how much the tenant's word exceeded the broker's record
  std::string detail;
};

class SwapBooks {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static constexpr std::chrono::seconds kMoveHold{30};
  static constexpr int kSnapshotAttempts = 8;

  // The tenant's swapped counters against its registered slots and its allowances, its
  // registered slots' reserve words against its caps; corrects and says what was
  // wrong. Call every books tick, not while Dead slots await their reclaim (their pages are
  // still in the counter) nor during a lost ledger's hold.
  std::vector<SwapFinding> check(const BooksSubject& subject, TimePoint now);
  void forget(const std::string& tenant) { tenants_.erase(tenant); }
  // What one registered process may say it holds for the tenant's swap reserve without being
  // cut: the tenant's caps summed over its present GPUs.
  static uint64_t reserve_bound(const TenantQuota& quota);

 private:
  struct TenantState {
    std::array<TimePoint, kMaxDevices> demand_seen{};  // the last check that saw a demand open
    bool seen = false;
  };
  void on_host(const BooksSubject& s, TenantState& t, uint32_t device, TimePoint now,
               std::vector<SwapFinding>& out);
  void reserve_words(const BooksSubject& s, std::vector<SwapFinding>& out);

  std::unordered_map<std::string, TenantState> tenants_;
  std::vector<uint32_t> slots_;  // the registered slots of the tenant being checked
};

}  // namespace fracgpu::broker
