// BooksCheck: the quota and ledger comparisons, their repairs and the burst flag (rules
// in books_check.h). The ledger arithmetic is ledger_ops' (check_used, lower_grant).
#include "core/books_check.h"

#include <algorithm>
#include <cstring>

#include "core/ledger_ops.h"
#include "core/quantity_parser.h"
#include "core/swap_books.h"

namespace fracgpu::broker {
namespace {

std::string uuid_text(const DeviceQuota& q) {
  return std::string(q.uuid, strnlen(q.uuid, sizeof q.uuid));
}

uint64_t difference(uint64_t a, uint64_t b) {
  return a > b ? a - b : b - a;
}

const char* state_name(uint32_t state) {
  switch (static_cast<SlotState>(state)) {
    case SlotState::kFree:
      return "free";
    case SlotState::kLive:
      return "live";
    case SlotState::kDead:
      return "dead";
  }
  return "invalid";
}

// Mismatches of one quota device against its spec, as "field X instead of Y" phrases.
void compare_device(const DeviceQuota& q, const DeviceSpec& d, const GpuInfo* gpu,
                    std::vector<std::string>& wrong, uint64_t& bytes) {
  auto differs = [&](const char* field, uint64_t seen, uint64_t want, bool size) {
    if (seen == want) return;
    wrong.push_back(std::string(field) + " " + (size ? format_size(seen) : std::to_string(seen)) +
                    " instead of " + (size ? format_size(want) : std::to_string(want)));
    if (size) bytes = std::max(bytes, difference(seen, want));
  };
  differs("present", q.present, 1, false);
  differs("host_index", q.host_index, d.gpu, false);
  const std::string& uuid = gpu != nullptr ? gpu->uuid : d.uuid;
  if (!uuid.empty() && strncmp(q.uuid, uuid.c_str(), sizeof q.uuid) != 0)
    wrong.push_back("uuid " + uuid_text(q));
  differs("memory_limit", q.memory_limit.load(), d.memory_limit, true);
  differs("memory_request", q.memory_request.load(), d.memory_request, true);
  differs("compute_weight", q.compute_weight.load(), d.compute, false);
  differs("compute_ceiling_pct", q.compute_ceiling_pct.load(), d.compute_limit, false);
  differs("priority", q.priority.load(), static_cast<uint32_t>(d.priority), false);
  if (gpu != nullptr)
    differs("context_footprint", q.context_footprint.load(), gpu->context_footprint, true);
  const uint64_t grant = q.memory_grant.load();
  if (grant < d.memory_request || grant > d.memory_limit) {
    wrong.push_back("memory_grant " + format_size(grant) + " outside [request, limit]");
    bytes = std::max(bytes, grant > d.memory_limit ? grant - d.memory_limit : 0);
  }
}

// The every-tick fast path of the ledger check: each registered slot holds what the
// broker wrote there and is between operations, and each device's counter equals the
// plain sum of those slots' used[]. True means nothing to repair; false sends the tenant
// through the full check, whose consistent snapshot decides (a reserve in flight between
// its two stores also lands there, and settles).
bool books_agree(const BooksSubject& s) {
  const TenantLedger& l = s.ledger;
  for (const WatchedSlot& ws : s.watched) {
    if (ws.slot >= kMaxProcesses) return false;
    const ProcessSlot& slot = l.processes[ws.slot];
    if (slot.state.load() != static_cast<uint32_t>(SlotState::kLive) || slot.pid.load() != ws.pid ||
        slot.start_time.load() != ws.start_time || slot.op_seq.load() % 2 != 0)
      return false;
  }
  const std::size_t count = std::min(s.spec.devices.size(), kMaxDevices);
  for (std::size_t d = 0; d < count; ++d) {
    uint64_t sum = 0;
    for (const WatchedSlot& ws : s.watched) sum += l.processes[ws.slot].used[d].load();
    if (sum != l.devices[d].used.load()) return false;
  }
  return true;
}

}  // namespace

BooksCheck::BooksCheck(const GpuInventory& gpus)
    : gpus_(gpus), swap_(std::make_unique<SwapBooks>()) {}
BooksCheck::~BooksCheck() = default;

BooksCheck::TenantState& BooksCheck::state_of(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) it = tenants_.emplace(tenant, TenantState{}).first;
  return it->second;
}

uint64_t BooksCheck::full_scan_period() const {
  const uint64_t by_budget =
      (tenants_.size() * kMaxProcesses + kFullScanSlotsPerTick - 1) / kFullScanSlotsPerTick;
  return std::max<uint64_t>(kFullScanEvery, by_budget);
}

void BooksCheck::note_grants(const std::string& tenant, const TenantQuota& quota) {
  TenantState& t = state_of(tenant);
  const uint32_t n = std::min<uint32_t>(quota.device_count, kMaxDevices);
  t.grants.resize(n);
  for (uint32_t i = 0; i < n; ++i) t.grants[i] = quota.devices[i].memory_grant.load();
  t.grants_known = true;
}

void BooksCheck::forget(const std::string& tenant) {
  tenants_.erase(tenant);
  swap_->forget(tenant);
}

void BooksCheck::flag(TenantState& t, std::chrono::steady_clock::time_point now) {
  t.flagged_until = now + kFlagDuration;
}

int64_t BooksCheck::flag_seconds_left(const std::string& tenant,
                                      std::chrono::steady_clock::time_point now) const {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end() || it->second.flagged_until <= now) return 0;
  return std::chrono::ceil<std::chrono::seconds>(it->second.flagged_until - now).count();
}

bool BooksCheck::burst_refused(const std::string& tenant, std::chrono::steady_clock::time_point now,
                               std::string* why) const {
  const int64_t left = flag_seconds_left(tenant, now);
  if (left == 0) return false;
  if (why != nullptr) {
    *why = "tenant '" + tenant +
           "' is flagged: one of its processes altered its quota or ledger (see the broker "
           "log), so requests for more memory are refused until " +
           std::to_string(kFlagDuration.count()) + " s after the last inconsistency (" +
           std::to_string(left) + " s left)";
  }
  return true;
}

Violation BooksCheck::violation(const BooksSubject& s, uint32_t device, ViolationKind kind,
                                int32_t pid, uint64_t bytes, std::string action,
                                std::string detail) const {
  Violation v;
  v.tenant = s.spec.name;
  v.kind = kind;
  v.pid = pid;
  v.bytes = bytes;
  v.action = std::move(action);
  v.detail = std::move(detail);
  if (device < s.spec.devices.size()) {
    v.gpu = s.spec.devices[device].gpu;
    const GpuInfo* gpu = gpus_.find(v.gpu);
    v.gpu_uuid = gpu != nullptr ? gpu->uuid : s.spec.devices[device].uuid;
  }
  return v;
}

std::vector<Violation> BooksCheck::check(const BooksSubject& s,
                                         std::chrono::steady_clock::time_point now) {
  TenantState& t = state_of(s.spec.name);
  if (!t.offset_known) {  // hashed once: tenants take turns for the full slot scan
    t.scan_offset = std::hash<std::string>{}(s.spec.name);
    t.offset_known = true;
  }
  const bool full_scan = (t.ticks++ + t.scan_offset) % full_scan_period() == 0;
  std::vector<Violation> out = quota_of(s, t, now);
  std::vector<Violation> ledger = ledger_of(s, t, now, full_scan);
  if (!s.reclaim_pending) {
    // After the quota's repair: the allowances and reserves it compares with are the broker's.
    const std::vector<SwapFinding> swap = swap_->check(s, now);
    for (const SwapFinding& f : swap)
      ledger.push_back(
          violation(s, f.device, ViolationKind::kSwap, f.pid, f.bytes, "repaired", f.detail));
    if (!swap.empty()) flag(t, now);
  }
  if (out.empty()) return ledger;
  out.insert(out.end(), ledger.begin(), ledger.end());
  return out;
}

std::vector<Violation> BooksCheck::check_quota(const BooksSubject& s,
                                               std::chrono::steady_clock::time_point now) {
  return quota_of(s, state_of(s.spec.name), now);
}

std::vector<Violation> BooksCheck::check_ledger(const BooksSubject& s,
                                                std::chrono::steady_clock::time_point now,
                                                bool full_scan) {
  return ledger_of(s, state_of(s.spec.name), now, full_scan);
}

std::vector<Violation> BooksCheck::quota_of(const BooksSubject& s, TenantState& t,
                                            std::chrono::steady_clock::time_point now) {
  const TenantQuota& q = s.quota;
  const uint32_t count = static_cast<uint32_t>(std::min(s.spec.devices.size(), kMaxDevices));
  std::vector<std::string> wrong;
  uint64_t bytes = 0;
  uint32_t first = 0;  // the first device found wrong, for the violation's GPU
  bool found = false;
  if (q.device_count != count) wrong.push_back("device_count " + std::to_string(q.device_count));
  if (strncmp(q.tenant, s.spec.name.c_str(), sizeof q.tenant) != 0) wrong.push_back("tenant name");
  for (uint32_t i = 0; i < count; ++i) {
    const std::size_t before = wrong.size();
    const DeviceQuota& dq = q.devices[i];
    compare_device(dq, s.spec.devices[i], gpus_.find(s.spec.devices[i].gpu), wrong, bytes);
    if (t.grants_known && i < t.grants.size() && dq.memory_grant.load() != t.grants[i]) {
      wrong.push_back("memory_grant " + format_size(dq.memory_grant.load()) + " instead of " +
                      format_size(t.grants[i]));
      bytes = std::max(bytes, difference(dq.memory_grant.load(), t.grants[i]));
    }
    if (wrong.size() > before && !found) {
      first = i;
      found = true;
    }
  }
  if (wrong.empty()) return {};

  if (s.republish) s.republish();  // limits, request, weights... from the spec
  if (t.grants_known) {
    for (uint32_t i = 0; i < count && i < t.grants.size(); ++i) {
      DeviceQuota& dq = s.quota.devices[i];
      const DeviceSpec& d = s.spec.devices[i];
      const uint64_t want = std::clamp(t.grants[i], d.memory_request, d.memory_limit);
      if (dq.memory_grant.load() > want)
        ledger::lower_grant(dq, s.ledger.devices[i], want);  // never below what is in use
      else
        dq.memory_grant.store(want);
    }
  }
  note_grants(s.spec.name, s.quota);
  flag(t, now);
  std::string detail = "the quota was altered (";
  for (std::size_t i = 0; i < wrong.size(); ++i) detail += (i ? "; " : "") + wrong[i];
  return {violation(s, first, ViolationKind::kQuota, 0, bytes, "restored",
                    detail + "); restored from the broker's record")};
}

std::vector<Violation> BooksCheck::ledger_of(const BooksSubject& s, TenantState& t,
                                             std::chrono::steady_clock::time_point now,
                                             bool full_scan) {
  if (s.reclaim_pending) return {};  // Dead slots of real processes are being reclaimed
  // Every tick: the cheap comparison; the snapshot only when it disagrees, or while a
  // slot is being watched for staying inside an operation.
  if (!full_scan && t.odd_slots.empty() && books_agree(s)) return {};
  TenantLedger& l = s.ledger;
  std::vector<Violation> out;
  // The broker's registered processes: their slots say what the broker wrote there.
  std::vector<uint32_t> slots;
  slots.reserve(s.watched.size());
  for (const WatchedSlot& ws : s.watched) {
    if (ws.slot >= kMaxProcesses) continue;
    slots.push_back(ws.slot);
    ProcessSlot& slot = l.processes[ws.slot];
    const uint32_t state = slot.state.load();
    if (state == static_cast<uint32_t>(SlotState::kLive) && slot.pid.load() == ws.pid &&
        slot.start_time.load() == ws.start_time)
      continue;
    out.push_back(violation(s, 0, ViolationKind::kLedger, ws.pid, 0, "repaired",
                            "slot " + std::to_string(ws.slot) + " of registered pid " +
                                std::to_string(ws.pid) + " was rewritten (state " +
                                state_name(state) + ", pid " + std::to_string(slot.pid.load()) +
                                "); restored"));
    slot.pid.store(ws.pid);
    slot.start_time.store(ws.start_time);
    slot.state.store(static_cast<uint32_t>(SlotState::kLive));
  }
  if (full_scan) {
    // Any other slot not Free is forged: with no reclaim pending there are no Dead slots
    // of real processes, and every Live one is watched. Freed WITHOUT subtracting its
    // used[]: bytes the tenant wrote must never lower its counter (the reconciler's
    // exact-share subtraction would, for a forged Dead slot).
    std::size_t w = 0;
    for (uint32_t i = 0; i < kMaxProcesses; ++i) {
      while (w < slots.size() && slots[w] < i) ++w;
      if (w < slots.size() && slots[w] == i) continue;
      ProcessSlot& slot = l.processes[i];
      const uint32_t state = slot.state.load();
      if (state == static_cast<uint32_t>(SlotState::kFree)) continue;
      out.push_back(violation(s, 0, ViolationKind::kLedger, slot.pid.load(), 0, "repaired",
                              "slot " + std::to_string(i) + " claims pid " +
                                  std::to_string(slot.pid.load()) + " (state " + state_name(state) +
                                  ") but no such process registered; freed"));
      for (auto& u : slot.used) u.store(0);
      slot.op_seq.store(0);
      slot.pid.store(0);
      slot.start_time.store(0);
      slot.state.store(static_cast<uint32_t>(SlotState::kFree));
    }
  }
  // The counter against the registered processes' slots, from one consistent snapshot.
  const uint32_t count = static_cast<uint32_t>(std::min(s.spec.devices.size(), kMaxDevices));
  bool unsettled = false;
  for (uint32_t d = 0; d < count; ++d) {
    const ledger::UsedCheck r = ledger::check_used_of(l, d, slots, kSnapshotAttempts);
    if (!r.settled) {
      unsettled = true;
    } else if (r.seen != r.truth) {
      out.push_back(violation(s, d, ViolationKind::kLedger, 0, difference(r.seen, r.truth),
                              "repaired",
                              "the ledger's used counter said " + format_size(r.seen) +
                                  " while its registered processes' slots sum to " +
                                  format_size(r.truth) + "; restored to the sum"));
    }
  }
  // A slot that stays inside one operation keeps every snapshot from settling.
  std::map<uint32_t, std::pair<uint64_t, int>> odd;
  if (unsettled) {
    for (const WatchedSlot& ws : s.watched) {
      if (ws.slot >= kMaxProcesses) continue;
      const uint64_t seq = l.processes[ws.slot].op_seq.load();
      if (seq % 2 == 0) continue;
      auto it = t.odd_slots.find(ws.slot);
      const int ticks =
          it != t.odd_slots.end() && it->second.first == seq ? it->second.second + 1 : 1;
      odd[ws.slot] = {seq, ticks};
      if (ticks == kStuckTicks) {
        out.push_back(violation(s, 0, ViolationKind::kLedger, ws.pid, 0, "logged",
                                "slot " + std::to_string(ws.slot) + " of pid " +
                                    std::to_string(ws.pid) +
                                    " has been inside one ledger operation for 2 s, which "
                                    "keeps the broker from checking the tenant's counters"));
      }
    }
  }
  t.odd_slots = std::move(odd);
  if (!out.empty()) flag(t, now);
  return out;
}

}  // namespace fracgpu::broker
