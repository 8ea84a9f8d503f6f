// The holds of lost ledgers (see ledger_rebuild.h): opening one from the scan, moving its
// bytes into re-registered slots, and ending it.
#include "core/ledger_rebuild.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/ledger_ops.h"
#include "core/process_tracker.h"
#include "core/quantity_parser.h"
#include "fracgpu/ledger_protocol.h"

namespace fracgpu::broker {
namespace {

uint32_t device_count(const Tenant& tenant) {
  return std::min<uint32_t>(tenant.segments->quota().device_count, kMaxDevices);
}

std::string pid_list(const std::map<pid_t, uint64_t>& pids) {
  std::string out;
  for (const auto& [pid, start] : pids) out += (out.empty() ? "" : ", ") + std::to_string(pid);
  return out;
}

std::string held_text(const Tenant& tenant, const std::array<uint64_t, kMaxDevices>& held) {
  std::string out;
  for (uint32_t d = 0; d < device_count(tenant); ++d) {
    if (held[d] == 0) continue;
    out += (out.empty() ? "" : ", ") + format_size(held[d]) + " on GPU " +
           std::to_string(tenant.segments->quota().devices[d].host_index);
  }
  return out.empty() ? "nothing" : out;
}

}  // namespace

void LedgerRebuilds::begin(const std::vector<Tenant*>& tenants, Clock::time_point now,
                           Found found) {
  std::vector<Tenant*> lost;
  std::vector<FileIdentity> files;
  for (Tenant* t : tenants) {
    if (!t->segments->take_lost_ledger()) continue;
    if (found == Found::kWhileRunning) {
      auto last = running_holds_.find(t->spec.name);
      if (last != running_holds_.end() && now - last->second < kRunningHoldEvery) {
        spdlog::warn(
            "tenant {}: its ledger was found zeroed again within {} s; rebuilt, its processes "
            "re-register, but nothing is held this time",
            t->spec.name, kRunningHoldEvery.count());
        continue;
      }
      running_holds_[t->spec.name] = now;
    }
    lost.push_back(t);
    files.push_back({t->segments->quota_file().dev, t->segments->quota_file().ino});
  }
  if (lost.empty()) return;
  const auto mappers = scan_(files);
  for (std::size_t i = 0; i < lost.size(); ++i) {
    auto it = mappers.find(files[i]);
    open_hold(*lost[i], it == mappers.end() ? std::vector<MappingProcess>{} : it->second, now);
  }
}

void LedgerRebuilds::open_hold(Tenant& tenant, const std::vector<MappingProcess>& mappers,
                               Clock::time_point now) {
  const std::string& name = tenant.spec.name;
  TenantLedger& ledger = tenant.ledger();
  // A process whose slot survived the rebuild (only the header was lost) is counted there
  // and re-attached like after any restart: only the others are waited for.
  Hold hold;
  for (const MappingProcess& p : mappers)
    if (!ledger::find_live_slot(ledger, p.pid, p.start_time)) hold.waiting[p.pid] = p.start_time;
  if (hold.waiting.empty()) {
    spdlog::info(
        "tenant {}: its ledger was rebuilt, and every process that maps its quota ({}) has its "
        "slot: nothing to hold",
        name, mappers.size());
    holds_.erase(name);
    return;
  }
  hold.deadline = now + kDeadline;
  // What the tenant was granted and its surviving slots do not book: the room its
  // processes may hold without a slot. The placeholder counts it until they re-register.
  bool any = false;
  for (uint32_t d = 0; d < device_count(tenant); ++d) {
    const uint64_t grant = tenant.quota().devices[d].memory_grant.load();
    const uint64_t booked = ledger::live_slot_sum(ledger, d);
    hold.held[d] = grant > booked ? grant - booked : 0;
    any = any || hold.held[d] > 0;
  }
  if (any) {
    hold.placeholder = ledger::claim_placeholder(ledger);
    if (!hold.placeholder) {
      spdlog::error("tenant {}: every slot of its ledger is taken; its lost memory cannot be held",
                    name);
      hold.held.fill(0);
    }
    for (uint32_t d = 0; hold.placeholder && d < device_count(tenant); ++d)
      ledger::charge(ledger, *hold.placeholder, d, hold.held[d]);
  }
  spdlog::warn(
      "tenant {}: its ledger was rebuilt while {} process(es) that map its quota run (pid {}); "
      "holding {} as unaccounted until they re-register or exit (at most {} s)",
      name, hold.waiting.size(), pid_list(hold.waiting), held_text(tenant, hold.held),
      kDeadline.count());
  holds_[name] = std::move(hold);
}

void LedgerRebuilds::reregistered(Tenant& tenant, pid_t pid, uint64_t start_time,
                                  const std::array<uint64_t, kMaxDevices>& added) {
  auto it = holds_.find(tenant.spec.name);
  if (it == holds_.end()) return;
  Hold& hold = it->second;
  auto waiting = hold.waiting.find(pid);
  if (waiting != hold.waiting.end() && waiting->second == start_time) {
    hold.waiting.erase(waiting);
    ++hold.rejoined;
  }
  // The process's slot was charged first (socket server); now the placeholder lets go of
  // as much: the counter over-states for a moment, never under-states.
  for (uint32_t d = 0; hold.placeholder && !hold.released && d < device_count(tenant); ++d) {
    const uint64_t moved = std::min(hold.held[d], added[d]);
    if (moved == 0) continue;
    ledger_protocol::release(tenant.ledger(), *hold.placeholder, d, moved);
    hold.held[d] -= moved;
  }
  if (hold.waiting.empty() && finish(tenant, hold, false)) holds_.erase(it);
}

void LedgerRebuilds::tick(TenantRegistry& registry, Clock::time_point now) {
  for (auto it = holds_.begin(); it != holds_.end();) {
    Tenant* tenant = registry.find(it->first);
    if (tenant == nullptr) {
      it = holds_.erase(it);
      continue;
    }
    Hold& hold = it->second;
    for (auto w = hold.waiting.begin(); w != hold.waiting.end();) {
      if (process_matches(w->first, w->second)) {
        ++w;
        continue;
      }
      w = hold.waiting.erase(w);
      ++hold.exited;
    }
    const bool late = now >= hold.deadline;
    if ((hold.waiting.empty() || late) && finish(*tenant, hold, late && !hold.waiting.empty())) {
      it = holds_.erase(it);
    } else {
      ++it;
    }
  }
}

bool LedgerRebuilds::finish(Tenant& tenant, Hold& hold, bool deadline_passed) {
  TenantLedger& ledger = tenant.ledger();
  const std::string& name = tenant.spec.name;
  if (!hold.released) {
    if (deadline_passed) {
      spdlog::warn(
          "tenant {}: pid {} did not re-register within {} s of the rebuild; releasing the {} "
          "held for them (their memory is no longer counted until they do)",
          name, pid_list(hold.waiting), kDeadline.count(), held_text(tenant, hold.held));
    }
    if (hold.placeholder) {
      for (uint32_t d = 0; d < device_count(tenant); ++d)
        if (hold.held[d] > 0) ledger_protocol::release(ledger, *hold.placeholder, d, hold.held[d]);
      ledger::free_claimed_slot(ledger, *hold.placeholder);
    }
    hold.held.fill(0);
    hold.released = true;
  }
  // The counters from the live slots: what a process added before it re-registered (into
  // a slot that was no longer its) goes; its re-charge holds it now.
  for (uint32_t d = 0; d < device_count(tenant); ++d) {
    const ledger::UsedCheck used = ledger::check_used(ledger, d, kSnapshotAttempts);
    if (!used.settled || !ledger::check_swapped(ledger, d, kSnapshotAttempts).settled)
      return false;  // processes too busy: again next tick, the hold stays pending
    if (used.seen != used.truth)
      spdlog::info("tenant {}: GPU {} counter {} set to its live slots' {} after the rebuild", name,
                   tenant.quota().devices[d].host_index, format_size(used.seen),
                   format_size(used.truth));
  }
  std::string books;
  for (uint32_t d = 0; d < device_count(tenant); ++d)
    books += (books.empty() ? "" : ", ") + format_size(ledger.devices[d].used.load()) + " on GPU " +
             std::to_string(tenant.quota().devices[d].host_index);
  spdlog::info(
      "tenant {}: rebuild settled ({} process(es) re-registered, {} exited{}); its books: {}", name,
      hold.rejoined, hold.exited,
      deadline_passed ? ", " + std::to_string(hold.waiting.size()) + " never came back" : "",
      books);
  return true;
}

std::optional<LedgerRebuilds::View> LedgerRebuilds::view(const std::string& tenant) const {
  auto it = holds_.find(tenant);
  if (it == holds_.end()) return std::nullopt;
  return View{it->second.placeholder, it->second.held, it->second.waiting.size()};
}

}  // namespace fracgpu::broker
