// AuditService: builds the audit's and the books check's inputs from the broker's state
// and records what they find (see audit_service.h).
#include "core/audit_service.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>

#include "core/swap_books.h"

namespace fracgpu::broker {

AuditService::AuditService(AuditOptions options, TenantRegistry& registry, ProcessTracker& tracker,
                           LedgerReconciler& reconciler, const GpuInventory& gpus)
    : options_(std::move(options)),
      registry_(registry),
      tracker_(tracker),
      reconciler_(reconciler),
      gpus_(gpus),
      processes_(options_.cgroups ? static_cast<CgroupReader&>(cgroup_files_) : no_cgroups_,
                 system_pidfd_ops()),
      audit_(AuditConfig{options_.action, static_cast<int32_t>(::getpid()), options_.tolerance, 2},
             processes_),
      books_(gpus),
      outside_(options_.fracgpu_only) {}

void AuditService::open() {
  if (options_.interval_ms <= 0) {
    unavailable_ = "disabled (--audit-interval 0)";
    spdlog::info("audit: NVML audit disabled (--audit-interval 0); books check on");
    return;
  }
  nvml_ = NvmlPort::open(options_.nvml_path, &unavailable_);
  if (!nvml_) {
    spdlog::warn("audit: NVML audit disabled: {}; books check on", unavailable_);
    return;
  }
  std::size_t matched = 0;
  for (const std::string& uuid : nvml_->uuids())
    matched += std::any_of(gpus_.gpus.begin(), gpus_.gpus.end(),
                           [&](const GpuInfo& g) { return g.uuid == uuid; });
  spdlog::info(
      "audit: NVML {} lists {} GPU(s), {} of them in the inventory; every {} ms, action {}, "
      "attribution by {}",
      options_.nvml_path, nvml_->uuids().size(), matched, options_.interval_ms,
      options_.action == AuditAction::kKill ? "kill" : "log",
      options_.cgroups ? "ancestry and cgroup" : "ancestry only (--audit-cgroups off)");
}

void AuditService::record(const std::vector<Violation>& found) {
  for (const Violation& v : found) log_.record(v);
}

void AuditService::audit_tick() {
  if (!nvml_) return;
  const auto started = std::chrono::steady_clock::now();
  std::vector<AuditGpu> gpus;
  std::size_t width = 0;
  for (const GpuInfo& g : gpus_.gpus) {
    gpus.push_back({g.index, g.uuid});
    width = std::max<std::size_t>(width, g.index + 1);
  }
  std::vector<AuditSample> samples;
  std::map<uint32_t, std::optional<uint64_t>> device_used;  // by host GPU: NVML's used memory
  for (GpuUsageSample& s : nvml_->sample()) {
    note_figures(s);
    auto gpu =
        std::find_if(gpus.begin(), gpus.end(), [&](const AuditGpu& g) { return g.uuid == s.uuid; });
    if (gpu == gpus.end()) continue;  // a GPU the broker does not manage
    if (!s.ok) spdlog::debug("audit: GPU {} not read this time: {}", gpu->index, s.error);
    device_used[gpu->index] = s.memory_used;
    samples.push_back({gpu->index, s.ok, std::move(s.processes)});
  }
  // Built after sampling: a process that registered before allocating shows registered.
  // Only tenants with registered processes: a process is attributed to a tenant through
  // its registered processes (themselves, an ancestor, their cgroup), so the others can
  // own nothing the sample shows.
  std::vector<AuditTenant> tenants;
  for (const std::string& name : tracker_.watched_tenants()) {
    Tenant* t = registry_.find(name);
    if (t == nullptr || watched_of(name).empty()) continue;
    AuditTenant at;
    at.name = t->spec.name;
    at.limit.assign(width, 0);
    at.footprint.assign(width, 0);
    for (const DeviceSpec& d : t->spec.devices) {
      if (d.gpu >= width) continue;
      at.limit[d.gpu] = d.memory_limit;
      if (const GpuInfo* g = gpus_.find(d.gpu)) at.footprint[d.gpu] = g->context_footprint;
    }
    const TenantLedger& ledger = t->ledger();
    for (const WatchedSlot& w : watched_of(t->spec.name)) {
      AuditRegistered p{w.pid, w.start_time, std::vector<uint64_t>(width, 0)};
      for (std::size_t i = 0; i < t->spec.devices.size() && i < kMaxDevices; ++i) {
        const uint32_t gpu = t->spec.devices[i].gpu;
        if (gpu < width && w.slot < kMaxProcesses)
          p.booked[gpu] = ledger.processes[w.slot].used[i].load();
      }
      at.processes.push_back(std::move(p));
    }
    tenants.push_back(std::move(at));
  }
  record(audit_.tick(gpus, tenants, samples));
  note_device_bytes(tenants, samples);
  account_outside(gpus, samples, device_used);
  nvml_time_ += std::chrono::steady_clock::now() - started;
  ++nvml_ticks_;
}

// Per tenant and GPU read: what NVML lists its registered processes holding (by pid; the
// tenants' lists were built after sampling, so a process that registered and then allocated
// is counted). Replaces, per GPU read, what the previous sample said.
void AuditService::note_device_bytes(const std::vector<AuditTenant>& tenants,
                                     const std::vector<AuditSample>& samples) {
  for (const AuditSample& s : samples) {
    if (!s.ok) continue;
    read_gpus_.insert(s.gpu);
    std::erase_if(device_bytes_, [&](const auto& e) { return e.first.second == s.gpu; });
    std::unordered_map<int32_t, const GpuProcessUsage*> by_pid;
    for (const GpuProcessUsage& p : s.processes) by_pid[static_cast<int32_t>(p.pid)] = &p;
    for (const AuditTenant& t : tenants) {
      std::optional<uint64_t> sum = 0;
      for (const AuditRegistered& r : t.processes) {
        auto it = by_pid.find(r.pid);
        if (it == by_pid.end()) continue;
        if (!it->second->bytes_known) {
          sum.reset();
          break;
        }
        *sum = saturating_add(*sum, it->second->bytes);
      }
      device_bytes_[{t.name, s.gpu}] = sum;
    }
  }
}

std::optional<uint64_t> AuditService::device_bytes(const std::string& tenant, uint32_t gpu) const {
  if (!nvml_) return std::nullopt;
  if (!read_gpus_.contains(gpu))
    return nvml_ticks_ == 0 ? std::optional<uint64_t>(0) : std::nullopt;
  auto it = device_bytes_.find({tenant, gpu});
  return it == device_bytes_.end() ? std::optional<uint64_t>(0) : it->second;
}

// Memory outside every tenant on each GPU read (outside_usage.h): the processes the audit
// attributed to no tenant, and NVML's device used beyond what every listed process holds.
void AuditService::account_outside(const std::vector<AuditGpu>& gpus,
                                   const std::vector<AuditSample>& samples,
                                   const std::map<uint32_t, std::optional<uint64_t>>& used) {
  const auto now = std::chrono::system_clock::now();
  for (const AuditSample& s : samples) {
    if (!s.ok) continue;
    uint64_t listed = 0;
    for (const GpuProcessUsage& p : s.processes) listed += p.bytes_known ? p.bytes : 0;
    std::vector<GpuProcessUsage> outside;
    if (auto it = audit_.outside().find(s.gpu); it != audit_.outside().end()) outside = it->second;
    auto gpu =
        std::find_if(gpus.begin(), gpus.end(), [&](const AuditGpu& g) { return g.index == s.gpu; });
    auto device = used.find(s.gpu);
    outside_.update(s.gpu, gpu != gpus.end() ? gpu->uuid : std::string(), std::move(outside),
                    listed, device != used.end() ? device->second : std::nullopt, now);
  }
}

// The broker's record of the tenant's registered processes, rebuilt only when the
// tracker's generation for the tenant moved (a registration or a death).
const std::vector<WatchedSlot>& AuditService::watched_of(const std::string& tenant) {
  WatchedCache& c = watched_[tenant];
  const uint64_t generation = tracker_.generation(tenant);
  if (!c.valid || c.generation != generation) {
    c.slots.clear();
    for (const ProcessTracker::Watched& w : tracker_.watches_of(tenant))
      c.slots.push_back({w.slot, static_cast<int32_t>(w.pid), w.start_time});
    c.generation = generation;
    c.valid = true;
  }
  return c.slots;
}

BooksSubject AuditService::subject(Tenant& tenant) {
  return BooksSubject{tenant.spec,
                      tenant.quota(),
                      tenant.ledger(),
                      watched_of(tenant.spec.name),
                      reconciler_.pending(tenant.spec.name),
                      [this, &tenant] { tenant.segments->publish(tenant.spec, gpus_); }};
}

void AuditService::books_tick() {
  const auto now = std::chrono::steady_clock::now();
  // A tenant with a registered process is checked every tick. One without has nobody
  // known to map its segments (only a child forked from an exited process could): it is
  // checked every kQuietTenantEvery-th tick, within the audit's 1 s, which keeps
  // an idle broker with 1,000 tenants cheap.
  if (books_ticks_ % kQuietTenantEvery == 0) {
    for (Tenant* t : registry_.all()) record(books_.check(subject(*t), now));
  } else {
    for (const std::string& name : tracker_.watched_tenants())
      if (Tenant* t = registry_.find(name)) record(books_.check(subject(*t), now));
  }
  books_time_ += std::chrono::steady_clock::now() - now;
  ++books_ticks_;
}

void AuditService::verify_grants() {
  const auto now = std::chrono::steady_clock::now();
  for (Tenant* t : registry_.all()) record(books_.check_quota(subject(*t), now));
}

void AuditService::note_grants() {
  for (Tenant* t : registry_.all()) books_.note_grants(t->spec.name, t->quota());
}

bool AuditService::burst_refused(const std::string& tenant, std::string* why) const {
  return books_.burst_refused(tenant, std::chrono::steady_clock::now(), why);
}

void AuditService::forget(const std::string& tenant) {
  watched_.erase(tenant);
  books_.forget(tenant);
  log_.forget(tenant);
}

nlohmann::json AuditService::gpu_json(const GpuInfo& gpu) const {
  if (!nvml_) return {{"available", false}, {"reason", unavailable_}};
  const auto uuids = nvml_->uuids();
  if (std::find(uuids.begin(), uuids.end(), gpu.uuid) == uuids.end())
    return {{"available", false}, {"reason", "NVML does not list this GPU's UUID"}};
  return {{"available", true},
          {"interval_ms", options_.interval_ms},
          {"action", options_.action == AuditAction::kKill ? "kill" : "log"}};
}

nlohmann::json AuditService::tenant_json(const std::string& tenant) const {
  nlohmann::json j = log_.tenant_json(tenant);
  const int64_t left = books_.flag_seconds_left(tenant, std::chrono::steady_clock::now());
  j["flagged"] = left > 0;
  if (left > 0) j["bursts_refused_for_s"] = left;
  return j;
}

void AuditService::note_figures(const GpuUsageSample& sample) {
  if (!sample.ok) {
    figures_.erase(sample.uuid);
    return;
  }
  NvmlGpuFigures f;
  for (const GpuProcessUsage& p : sample.processes) f.memory_used += p.bytes_known ? p.bytes : 0;
  if (sample.memory_used) f.memory_used = *sample.memory_used;  // the device's own figure
  f.utilization = sample.utilization;
  figures_[sample.uuid] = f;
}

std::optional<NvmlGpuFigures> AuditService::nvml_figures(const std::string& uuid) const {
  auto it = figures_.find(uuid);
  if (it == figures_.end()) return std::nullopt;
  return it->second;
}

}  // namespace fracgpu::broker
