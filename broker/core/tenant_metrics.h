// What one Prometheus scrape reads from the broker: a snapshot of plain values taken from
// the live quota and ledger segments (TenantRegistry), the broker's record of registered
// processes (ProcessTracker), the compute schedulers (ComputeService), the audit
// (AuditService: violations, NVML figures) and the GPU inventory. metrics_exposition.h
// turns a snapshot into the text exposition.
// The snapshot is taken under the broker's state mutex (the event loop waits meanwhile),
// so it copies values only: a few microseconds per tenant and GPU (never a scan of the
// ledger's 512 process slots). Building and serialising the Prometheus registry happens
// after the mutex is released. The shim is never involved: its hot paths touch no metric.
// Metric names, types and labels: docs/monitoring.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/audit_service.h"
#include "core/compute_service.h"
#include "core/gpu_inventory.h"
#include "core/process_tracker.h"
#include "core/tenant_registry.h"
#include "core/tenant_spec.h"
#include "core/usage_audit.h"

namespace fracgpu::broker {

// The labels of every per-tenant series.
struct TenantSeriesLabels {
  std::string tenant;
  uint32_t gpu = 0;      // host index
  std::string gpu_uuid;  // the inventory's UUID of that index (the persisted one if it is gone)
  PodIdentity pod;       // namespace, pod, container (empty outside Kubernetes)
};

// One tenant on one of its GPUs.
struct TenantGpuMetrics {
  TenantSeriesLabels labels;
  uint64_t memory_limit = 0;
  uint64_t memory_request = 0;
  uint64_t memory_grant = 0;
  uint64_t memory_used = 0;
  uint64_t memory_peak = 0;
  uint64_t memory_swapped = 0;
  // The tenant's processes' swap reserve (pinned, empty host memory, tenant_segment.h minor 6)
  // attributed to this GPU: see host_reserved_bytes_by_gpu.
  uint64_t memory_host_reserved = 0;
  uint64_t allocation_refusals = 0;
  uint64_t burst_requests = 0;
  uint32_t compute_weight = 0;
  uint32_t compute_ceiling_pct = 0;  // 0 = none
  PriorityClass priority = PriorityClass::kNormal;
  uint32_t processes = 0;  // registered processes holding memory (a context) on this GPU
  // Held, waited and measured share; nullopt when no scheduler knows the tenant here.
  std::optional<ComputeStatus> compute;
};

// fracgpu_audit_violations_total: one series per tenant, GPU and kind.
struct ViolationSeries {
  std::size_t tenant = 0;  // index into MetricsSnapshot::tenants: its tenant and pod labels
  uint32_t gpu = 0;        // the GPU the violation was found on (and its UUID)
  std::string gpu_uuid;
  ViolationKind kind = ViolationKind::kOverCap;
  uint64_t count = 0;
};

struct GpuMetrics {
  uint32_t index = 0;
  std::string uuid;
  uint64_t memory_total = 0;
  uint64_t memory_used = 0;           // NVML's figure when there is one, else the tenants' books
  std::optional<double> utilization;  // NVML only
  // Held outside every tenant (outside_usage.h); nullopt until the audit read the GPU.
  std::optional<uint64_t> memory_outside;
  uint64_t outside_violations = 0;  // with --fracgpu-only
  uint32_t tenants = 0;
  GpuComputeCounters compute;  // zeros on a GPU no tenant was ever scheduled on
};

// The broker's own cost of auditing (not part of the per-tenant contract).
struct AuditCostMetrics {
  double nvml_seconds = 0;
  double books_seconds = 0;
  uint64_t nvml_passes = 0;
  uint64_t books_passes = 0;
};

struct MetricsSnapshot {
  std::string version;  // fracgpu_build_info{version}
  std::vector<TenantGpuMetrics> tenants;
  std::vector<ViolationSeries> violations;  // empty without an audit
  std::vector<GpuMetrics> gpus;
  std::optional<AuditCostMetrics> audit_cost;
};

// The version fracgpu_build_info reports (the project's CMake version).
const char* fracgpu_version();

// Where a scrape reads from. `compute` and `audit` may be null (their series are then
// absent, except the GPU counters, which read 0).
struct MetricsSources {
  TenantRegistry& registry;
  const ProcessTracker& tracker;  // who registered: the broker's record, not the ledger's
  const ComputeService* compute = nullptr;
  const AuditService* audit = nullptr;
};

// Reads everything a scrape reports. Call under the broker's state mutex.
MetricsSnapshot take_metrics_snapshot(const MetricsSources& sources);

// The tenant's memory currently moved to host memory by overcommit (DeviceUsage::swapped,
// tenant_segment.h minor 3) as the broker counts it: at most its host_allowance (minor 7,
// swap_books.h); fracgpu_memory_swapped_bytes reads it from here.
uint64_t memory_swapped_bytes(const DeviceQuota& quota, const DeviceUsage& usage);

// What the tenant's registered processes (`watched`: the broker's record) hold for the swap
// reserve (TenantLedger.host_reserved, minor 6; 0 for a ledger without it), per device of
// its quota (`count` of them), for fracgpu_memory_host_reserved_bytes. A process holds its
// reserve for all its GPUs together, so the sum is split: each device, in the quota's order,
// up to its host_reserve, and what they hold beyond the reserves (trimmed at their next look)
// on the first device. The per-tenant sum is exact, except that each process's word counts at
// most `per_process_most` (the books check's bound, the tenant's caps, swap_books.h: a
// tenant's word makes no alert of 2^64) and the sum saturates.
std::vector<uint64_t> host_reserved_bytes_by_gpu(
    const TenantQuota& quota, const TenantLedger& ledger,
    const std::vector<ProcessTracker::Watched>& watched, std::size_t count,
    uint64_t per_process_most = UINT64_MAX);

}  // namespace fracgpu::broker
