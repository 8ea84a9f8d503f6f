// UsageAudit: attribution, the three NVML-based kinds, episodes and the kill action
// (rules in usage_audit.h).
#include "core/usage_audit.h"

#include <algorithm>
#include <climits>

#include "core/cgroup_identity.h"
#include "core/quantity_parser.h"

namespace fracgpu::broker {
namespace {

constexpr int kMaxAncestry = 64;

// Cgroups that say nothing about a tenant: unknown, or the root of every hierarchy
// (cgroup_identity.h gives "" for both).
bool meaningless_cgroup(const std::string& identity) {
  return identity.empty();
}

}  // namespace

const char* violation_kind_name(ViolationKind kind) {
  switch (kind) {
    case ViolationKind::kOverCap:
      return "over_cap";
    case ViolationKind::kUnregistered:
      return "unregistered";
    case ViolationKind::kBooks:
      return "books";
    case ViolationKind::kLedger:
      return "ledger";
    case ViolationKind::kQuota:
      return "quota";
    case ViolationKind::kSwap:
      return "swap";
  }
  return "unknown";
}

UsageAudit::UsageAudit(AuditConfig config, ProcessPort& processes)
    : config_(config), port_(processes) {}

uint64_t UsageAudit::tolerance(uint64_t limit) const {
  return std::max(config_.tolerance_floor, limit / 100 * config_.tolerance_percent);
}

// Start time, cgroup and ancestry of an unregistered process, read once per process.
const UsageAudit::Facts* UsageAudit::facts_of(int32_t pid) {
  if (auto it = facts_.find(pid); it != facts_.end()) return &it->second;
  auto described = port_.describe(pid);
  if (!described) return nullptr;
  Facts facts{described->start_time, cgroup_identity(described->cgroup), {}};
  int32_t parent = described->ppid;
  for (int depth = 0; depth < kMaxAncestry && parent > 1 && parent != config_.self_pid; ++depth) {
    auto up = port_.describe(parent);
    if (!up) break;
    facts.ancestors.emplace_back(parent, up->start_time);
    parent = up->ppid;
  }
  facts.broker_child = parent == config_.self_pid && parent > 1;
  return &facts_.emplace(pid, std::move(facts)).first->second;
}

// Cgroup -> the tenants whose registered processes run in it. The broker's own cgroup
// never identifies a tenant: on a host where everything shares one, it would attribute
// every GPU process on the node.
std::map<std::string, std::set<std::size_t>> UsageAudit::cgroups_of(
    const std::vector<AuditTenant>& tenants) {
  if (!self_cgroup_) {
    auto self = port_.describe(config_.self_pid);
    self_cgroup_ = self ? cgroup_identity(self->cgroup) : std::string();
  }
  std::map<std::string, std::set<std::size_t>> out;
  std::set<std::pair<int32_t, uint64_t>> alive;
  for (std::size_t t = 0; t < tenants.size(); ++t) {
    for (const AuditRegistered& p : tenants[t].processes) {
      const auto key = std::make_pair(p.pid, p.start_time);
      alive.insert(key);
      auto it = registered_cgroups_.find(key);
      if (it == registered_cgroups_.end()) {
        auto described = port_.describe(p.pid);
        const bool same = described && described->start_time == p.start_time;
        it = registered_cgroups_
                 .emplace(key, same ? cgroup_identity(described->cgroup) : std::string())
                 .first;
      }
      if (!meaningless_cgroup(it->second) && it->second != *self_cgroup_) out[it->second].insert(t);
    }
  }
  std::erase_if(registered_cgroups_, [&](const auto& e) { return alive.count(e.first) == 0; });
  return out;
}

namespace {

struct Attribution {
  std::size_t tenant = 0;
  int32_t ancestor = 0;  // 0: by cgroup
};

// Per tenant on one GPU: what its processes hold and who is most to blame.
struct Tally {
  uint64_t real = 0;
  int32_t unregistered_pid = 0;
  uint64_t unregistered_bytes = 0, unregistered_start = 0;
  int32_t excess_pid = 0;
  int64_t excess = INT64_MIN;
  uint64_t excess_start = 0;
  int32_t largest_pid = 0;
  uint64_t largest_bytes = 0, largest_start = 0;

  void add(int32_t pid, uint64_t start, uint64_t bytes) {
    real += bytes;
    if (largest_pid == 0 || bytes > largest_bytes) {
      largest_pid = pid;
      largest_bytes = bytes;
      largest_start = start;
    }
  }
  // over_cap's offender: an unregistered process, else the furthest above its books.
  std::pair<int32_t, uint64_t> offender() const {
    if (unregistered_pid != 0) return {unregistered_pid, unregistered_start};
    if (excess_pid != 0 && excess > 0) return {excess_pid, excess_start};
    return {largest_pid, largest_start};
  }
};

}  // namespace

void UsageAudit::evaluate_gpu(const AuditSample& sample, const std::string& uuid,
                              const std::vector<AuditTenant>& tenants,
                              const std::map<int32_t, Owner>& registered,
                              const std::map<std::string, std::set<std::size_t>>& by_cgroup,
                              std::map<EpisodeKey, Condition>& out) {
  const uint32_t g = sample.gpu;
  std::map<std::size_t, Tally> tallies;
  for (const GpuProcessUsage& p : sample.processes) {
    if (p.pid <= 1 || p.pid == config_.self_pid) continue;
    std::optional<Attribution> owner;
    bool broker_child = false;
    const AuditRegistered* reg = nullptr;
    uint64_t start = 0;
    if (auto it = registered.find(p.pid); it != registered.end()) {
      owner = Attribution{it->second.tenant, 0};
      reg = it->second.process;
      start = reg->start_time;
    } else if (const Facts* f = facts_of(p.pid)) {
      start = f->start_time;
      broker_child = f->broker_child;
      for (const auto& [pid, started] : f->ancestors) {
        auto up = registered.find(pid);
        if (up != registered.end() && up->second.process->start_time == started) {
          owner = Attribution{up->second.tenant, pid};
          break;
        }
      }
      if (!owner && !meaningless_cgroup(f->cgroup)) {
        auto c = by_cgroup.find(f->cgroup);
        if (c != by_cgroup.end() && c->second.size() == 1)
          owner = Attribution{*c->second.begin(), 0};
      }
    }
    if (!owner) {  // not a tenant's process: memory outside every tenant
      if (!broker_child) outside_[g].push_back(p);
      continue;
    }
    const AuditTenant& t = tenants[owner->tenant];
    const uint64_t limit = g < t.limit.size() ? t.limit[g] : 0;
    Tally& tally = tallies[owner->tenant];
    tally.add(p.pid, start, p.bytes);
    if (reg == nullptr) {
      if (tally.unregistered_pid == 0 || p.bytes > tally.unregistered_bytes) {
        tally.unregistered_pid = p.pid;
        tally.unregistered_bytes = p.bytes;
        tally.unregistered_start = start;
      }
      const std::string how = owner->ancestor != 0
                                  ? "its ancestor pid " + std::to_string(owner->ancestor) +
                                        " is registered in the tenant"
                                  : "it runs in the cgroup of the tenant's processes";
      Violation v{t.name,
                  g,
                  uuid,
                  p.pid,
                  ViolationKind::kUnregistered,
                  p.bytes,
                  "",
                  "pid " + std::to_string(p.pid) + " holds " +
                      (p.bytes_known ? format_size(p.bytes) : std::string("device memory")) +
                      " without being registered with the broker (" + how + ")"};
      out[{t.name, g, static_cast<uint32_t>(v.kind), p.pid, start}] = {std::move(v), start};
      continue;
    }
    const uint64_t booked = g < reg->booked.size() ? reg->booked[g] : 0;
    const uint64_t footprint = g < t.footprint.size() ? t.footprint[g] : 0;
    const int64_t excess = static_cast<int64_t>(p.bytes) - static_cast<int64_t>(booked);
    if (excess > tally.excess) {
      tally.excess = excess;
      tally.excess_pid = p.pid;
      tally.excess_start = start;
    }
    if (p.bytes > booked + footprint + tolerance(limit)) {
      Violation v{t.name,
                  g,
                  uuid,
                  p.pid,
                  ViolationKind::kBooks,
                  p.bytes - booked,
                  "",
                  "registered pid " + std::to_string(p.pid) + " holds " + format_size(p.bytes) +
                      " but its ledger slot books " + format_size(booked)};
      out[{t.name, g, static_cast<uint32_t>(v.kind), p.pid, start}] = {std::move(v), start};
    }
  }
  for (const auto& [index, tally] : tallies) {
    const AuditTenant& t = tenants[index];
    const uint64_t limit = g < t.limit.size() ? t.limit[g] : 0;
    if (tally.real <= limit + tolerance(limit)) continue;
    const auto [pid, start] = tally.offender();
    Violation v{t.name,
                g,
                uuid,
                pid,
                ViolationKind::kOverCap,
                tally.real,
                "",
                "the tenant's processes hold " + format_size(tally.real) +
                    " on the GPU, over its memory limit of " + format_size(limit) +
                    " (largest offender pid " + std::to_string(pid) + ")"};
    out[{t.name, g, static_cast<uint32_t>(v.kind), 0, 0}] = {std::move(v), start};
  }
}

bool UsageAudit::still_same_process(const Condition& c) {
  if (c.violation.pid == 0) return true;
  auto now = port_.describe(c.violation.pid);
  return now && now->start_time == c.start_time;
}

void UsageAudit::act(Violation& v, uint64_t start_time, std::set<int32_t>& killed) {
  if (config_.action != AuditAction::kKill || v.pid <= 1 || v.pid == config_.self_pid) {
    v.action = "logged";
    return;
  }
  if (killed.count(v.pid) != 0) {
    v.action = "killed";
    return;
  }
  const bool ok = port_.kill(v.pid, start_time);
  v.action = ok ? "killed" : "kill failed";
  if (ok) killed.insert(v.pid);
}

std::vector<Violation> UsageAudit::tick(const std::vector<AuditGpu>& gpus,
                                        const std::vector<AuditTenant>& tenants,
                                        const std::vector<AuditSample>& samples) {
  std::map<int32_t, Owner> registered;
  for (std::size_t t = 0; t < tenants.size(); ++t)
    for (const AuditRegistered& p : tenants[t].processes) registered.emplace(p.pid, Owner{t, &p});
  const auto by_cgroup = cgroups_of(tenants);

  std::map<EpisodeKey, Condition> current;
  std::set<uint32_t> sampled;
  outside_.clear();
  for (const AuditSample& s : samples) {
    if (!s.ok) continue;
    sampled.insert(s.gpu);
    auto gpu =
        std::find_if(gpus.begin(), gpus.end(), [&](const AuditGpu& g) { return g.index == s.gpu; });
    evaluate_gpu(s, gpu != gpus.end() ? gpu->uuid : std::string(), tenants, registered, by_cgroup,
                 current);
  }

  // Episodes of GPUs not read this time stay open as they were.
  std::set<EpisodeKey> next;
  for (const EpisodeKey& key : episodes_)
    if (sampled.count(std::get<1>(key)) == 0) next.insert(key);
  std::vector<Violation> started;
  std::set<int32_t> killed;
  // Per-process kinds first, so over_cap names a process that the kill already stopped.
  for (const bool over_cap_pass : {false, true}) {
    for (auto& [key, condition] : current) {
      const bool is_over_cap = std::get<2>(key) == static_cast<uint32_t>(ViolationKind::kOverCap);
      if (is_over_cap != over_cap_pass) continue;
      if (episodes_.count(key) != 0) {
        next.insert(key);  // still going: reported when it began
        continue;
      }
      // A recycled pid: look again next tick (one just killed was checked before the kill).
      if (killed.count(condition.violation.pid) == 0 && !still_same_process(condition)) {
        facts_.erase(condition.violation.pid);
        continue;
      }
      act(condition.violation, condition.start_time, killed);
      started.push_back(condition.violation);
      next.insert(key);
    }
  }
  episodes_ = std::move(next);

  // Forget processes no GPU lists any more (unless a GPU could not be read).
  if (sampled.size() == samples.size()) {
    std::set<int32_t> listed;
    for (const AuditSample& s : samples)
      for (const GpuProcessUsage& p : s.processes) listed.insert(p.pid);
    std::erase_if(facts_, [&](const auto& e) { return listed.count(e.first) == 0; });
  }
  return started;
}

}  // namespace fracgpu::broker
