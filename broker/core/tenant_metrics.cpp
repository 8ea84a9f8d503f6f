// Taking the metrics snapshot (see tenant_metrics.h): every value is a load of the live
// quota/ledger atomics or a copy of the scheduler's and the audit's counters, nothing is
// cached between scrapes, so a deleted tenant is simply no longer there.
#include "core/tenant_metrics.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>

#include "core/swap_books.h"

#ifndef FRACGPU_VERSION
#define FRACGPU_VERSION "unknown"
#endif

namespace fracgpu::broker {
namespace {

// The UUID the tenant's series carry: the inventory's for that index, so that they join
// the per-GPU series; the one persisted at admission if the GPU is gone from the node.
std::string uuid_of(const GpuInventory& gpus, const DeviceSpec& spec) {
  const GpuInfo* g = gpus.find(spec.gpu);
  return g != nullptr ? g->uuid : spec.uuid;
}

// Registered processes of the tenant (the broker's watches: the ledger's slot states are
// tenant-writable) that hold memory on device `index` of its ledger. Every CUDA context
// is charged its footprint, so these are the processes using that GPU.
uint32_t processes_on(const TenantLedger& ledger,
                      const std::vector<ProcessTracker::Watched>& watched, std::size_t index) {
  uint32_t n = 0;
  for (const ProcessTracker::Watched& w : watched) {
    if (w.slot < kMaxProcesses)
      n += ledger.processes[w.slot].used[index].load(std::memory_order_relaxed) > 0 ? 1 : 0;
  }
  return n;
}

TenantGpuMetrics tenant_gpu(Tenant& t, std::size_t i,
                            const std::vector<ProcessTracker::Watched>& watched,
                            const GpuInventory& gpus, const ComputeService* compute) {
  const DeviceSpec& spec = t.spec.devices[i];
  const DeviceQuota& q = t.quota().devices[i];
  const DeviceUsage& u = t.ledger().devices[i];
  TenantGpuMetrics m;
  m.labels = {t.spec.name, spec.gpu, uuid_of(gpus, spec), t.spec.pod};
  m.memory_limit = q.memory_limit.load();
  m.memory_request = q.memory_request.load();
  m.memory_grant = q.memory_grant.load();
  m.memory_used = u.used.load();
  m.memory_peak = u.peak.load();
  m.memory_swapped = memory_swapped_bytes(q, u);  // memory_host_reserved: take_metrics_snapshot
  m.allocation_refusals = u.oom_events.load();
  m.burst_requests = u.burst_requests.load();
  m.compute_weight = q.compute_weight.load();
  m.compute_ceiling_pct = q.compute_ceiling_pct.load();
  m.priority = static_cast<PriorityClass>(q.priority.load());
  m.processes = processes_on(t.ledger(), watched, i);
  if (compute != nullptr) m.compute = compute->status(t.spec.name, spec.gpu);
  return m;
}

// Every tenant x GPU x kind, 0 until something was found: a series that appears only
// with its first violation would be missed by increase() and rate(). Plus what a tenant
// was caught doing on a GPU it was not given (a bypassing process on another GPU).
void add_violations(MetricsSnapshot& snapshot, const ViolationLog& log) {
  snapshot.violations.reserve(snapshot.tenants.size() * kViolationKinds);
  std::map<std::string_view, std::size_t> first;  // tenant -> its first TenantGpuMetrics
  for (std::size_t i = snapshot.tenants.size(); i-- > 0;)
    first[snapshot.tenants[i].labels.tenant] = i;
  for (const auto& [key, count] : log.series()) {
    const auto& [tenant, gpu, uuid, kind] = key;
    auto it = first.find(tenant);
    if (it == first.end()) continue;  // deleted meanwhile
    bool own = false;
    for (std::size_t i = it->second;
         i < snapshot.tenants.size() && snapshot.tenants[i].labels.tenant == tenant; ++i)
      own = own || snapshot.tenants[i].labels.gpu == gpu;
    if (!own)
      snapshot.violations.push_back(
          {it->second, gpu, uuid, static_cast<ViolationKind>(kind), count});
  }
  for (std::size_t i = 0; i < snapshot.tenants.size(); ++i) {
    const TenantSeriesLabels& l = snapshot.tenants[i].labels;
    for (uint32_t k = 0; k < kViolationKinds; ++k) {
      const auto kind = static_cast<ViolationKind>(k);
      snapshot.violations.push_back({i, l.gpu, l.gpu_uuid, kind, log.count(l.tenant, l.gpu, kind)});
    }
  }
}

void add_gpus(MetricsSnapshot& snapshot, const GpuInventory& gpus, const ComputeService* compute,
              const AuditService* audit) {
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> books;  // index -> (tenants, used)
  for (const TenantGpuMetrics& t : snapshot.tenants) {
    auto& [tenants, used] = books[t.labels.gpu];
    ++tenants;
    used += t.memory_used;
  }
  for (const GpuInfo& g : gpus.gpus) {
    GpuMetrics m;
    m.index = g.index;
    m.uuid = g.uuid;
    m.memory_total = g.memory_total;
    std::tie(m.tenants, m.memory_used) = books[g.index];
    if (audit != nullptr) {
      if (auto nvml = audit->nvml_figures(g.uuid)) {
        m.memory_used = nvml->memory_used;
        m.utilization = nvml->utilization;
      }
      if (const OutsideGpu* outside = audit->outside().gpu(g.index))
        m.memory_outside = outside->total();
      m.outside_violations = audit->outside().violations(g.index);
    }
    if (compute != nullptr) {
      if (auto c = compute->gpu_counters(g.index)) m.compute = *c;
    }
    snapshot.gpus.push_back(std::move(m));
  }
}

}  // namespace

const char* fracgpu_version() {
  return FRACGPU_VERSION;
}

uint64_t memory_swapped_bytes(const DeviceQuota& quota, const DeviceUsage& usage) {
  return booked_on_host(quota, usage);
}

std::vector<uint64_t> host_reserved_bytes_by_gpu(
    const TenantQuota& quota, const TenantLedger& ledger,
    const std::vector<ProcessTracker::Watched>& watched, std::size_t count,
    uint64_t per_process_most) {
  std::vector<uint64_t> out(count, 0);
  if (count == 0 || !ledger_has_host_reserved(ledger.size)) return out;
  uint64_t held = 0;
  for (const ProcessTracker::Watched& w : watched)
    if (w.slot < kMaxProcesses)
      held = saturating_add(
          held,
          std::min(per_process_most, ledger.host_reserved[w.slot].load(std::memory_order_relaxed)));
  for (std::size_t i = 0; i < count && held > 0; ++i) {
    out[i] = std::min(held, quota.devices[i].host_reserve.load(std::memory_order_relaxed));
    held -= out[i];
  }
  out[0] += held;
  return out;
}

MetricsSnapshot take_metrics_snapshot(const MetricsSources& sources) {
  const auto& [registry, tracker, compute, audit] = sources;
  MetricsSnapshot snapshot;
  snapshot.version = fracgpu_version();
  const std::vector<Tenant*> tenants = registry.all();
  snapshot.tenants.reserve(tenants.size());
  for (Tenant* t : tenants) {
    const auto watched = tracker.watches_of(t->spec.name);
    const std::size_t count = std::min(t->spec.devices.size(), kMaxDevices);
    const std::size_t first = snapshot.tenants.size();
    for (std::size_t i = 0; i < count; ++i)
      snapshot.tenants.push_back(tenant_gpu(*t, i, watched, registry.gpus(), compute));
    const uint64_t most = SwapBooks::reserve_bound(t->quota());  // the books check's
    const auto reserved = host_reserved_bytes_by_gpu(t->quota(), t->ledger(), watched, count, most);
    for (std::size_t i = 0; i < count; ++i)
      snapshot.tenants[first + i].memory_host_reserved = reserved[i];
  }
  if (audit != nullptr) {
    add_violations(snapshot, audit->log());
    snapshot.audit_cost =
        AuditCostMetrics{std::chrono::duration<double>(audit->nvml_time()).count(),
                         std::chrono::duration<double>(audit->books_time()).count(),
                         audit->nvml_passes(), audit->books_passes()};
  }
  add_gpus(snapshot, registry.gpus(), compute, audit);
  return snapshot;
}

}  // namespace fracgpu::broker
