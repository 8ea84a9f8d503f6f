// Holding a tenant's memory while its processes re-register after its ledger was lost
// (rebuilt from a zeroed, truncated or garbled file, or re-created because it was gone)
// under processes that keep running and holding device memory. The rules are in
// tenant_segment.h ("A ledger lost"); the design in docs/design.md ("The memory ledger").
//
// begin(): one /proc scan (file_mappers.h) finds, for every tenant whose ledger was lost,
// the processes that map its quota file and have no live slot in it (a slot that
// survived, when only the header was lost, counts its process already); until each of
// them re-registered (the socket server calls reregistered() with what it re-charged) or
// exited, and at most kDeadline, the tenant's grant as of the rebuild — less what its
// slots book already — stays counted
// in a placeholder slot, so that the room its processes may still hold is given neither to
// the tenant's own new allocations nor to other tenants' bursts. Every re-charge moves its
// bytes from the placeholder into the process's slot. The end (everyone in, or the
// deadline) releases and frees the placeholder and recomputes the tenant's counters from
// its live slots. While a hold is open the books check leaves the tenant's ledger alone
// (LedgerReconciler::pending), since its counter and slots are being put together.
// Every step is logged (spdlog). Cost: nothing per tick without an open hold; with one, a
// process-exists check per waiting process per tick.
#pragma once

#include <sys/types.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/file_mappers.h"
#include "core/tenant_registry.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

class LedgerRebuilds {
 public:
  using Clock = std::chrono::steady_clock;
  // Long enough for every shim to notice (at once, through the incarnation's futex; at
  // worst its 500 ms poll) and re-register on a loaded node; a process that never does (a
  // shim older than layout 1.5, or one stopped with SIGSTOP) keeps no memory held longer.
  static constexpr std::chrono::seconds kDeadline{5};
  static constexpr int kSnapshotAttempts = 1000;

  explicit LedgerRebuilds(FileMappersScan scan = scan_file_mappers) : scan_(std::move(scan)) {}

  // A ledger found zeroed while the broker runs was zeroed by someone who can write it — a
  // tenant's own process, maybe — and a hold keeps the books check off the tenant's ledger:
  // such a hold opens at most once per kRunningHoldEvery per tenant (the rebuild and the
  // re-registrations happen every time).
  static constexpr std::chrono::seconds kRunningHoldEvery{60};
  enum class Found { kAtStart, kWhileRunning };

  // Opens a hold for every tenant in `tenants` whose ledger was lost (consumes
  // TenantSegments::take_lost_ledger), with one scan for all of them.
  void begin(const std::vector<Tenant*>& tenants, Clock::time_point now,
             Found found = Found::kAtStart);
  // `pid` (started at `start_time`) of the tenant re-registered; its slot books `added`
  // more bytes per quota device than before its re-charge.
  void reregistered(Tenant& tenant, pid_t pid, uint64_t start_time,
                    const std::array<uint64_t, kMaxDevices>& added);
  // Forgets processes that exited; ends the holds that are complete or past their deadline.
  void tick(TenantRegistry& registry, Clock::time_point now);

  bool pending(const std::string& tenant) const { return holds_.count(tenant) != 0; }
  // The placeholder's slot and what it still holds per quota device (tests, status).
  struct View {
    std::optional<uint32_t> placeholder;
    std::array<uint64_t, kMaxDevices> held{};
    std::size_t waiting = 0;
  };
  std::optional<View> view(const std::string& tenant) const;
  void forget(const std::string& tenant) {
    holds_.erase(tenant);
    running_holds_.erase(tenant);
  }

 private:
  struct Hold {
    std::optional<uint32_t> placeholder;
    std::array<uint64_t, kMaxDevices> held{};
    std::map<pid_t, uint64_t> waiting;  // pid -> start time
    Clock::time_point deadline{};
    uint32_t rejoined = 0, exited = 0;
    bool released = false;  // the placeholder is gone; only the counters' check is left
  };
  void open_hold(Tenant& tenant, const std::vector<MappingProcess>& mappers, Clock::time_point now);
  // True when the hold is over (placeholder released, counters consistent).
  bool finish(Tenant& tenant, Hold& hold, bool deadline_passed);

  FileMappersScan scan_;
  std::map<std::string, Hold, std::less<>> holds_;
  std::map<std::string, Clock::time_point, std::less<>> running_holds_;  // the latest opened
};

}  // namespace fracgpu::broker
