// Families of the metrics contract (docs/monitoring.md) filled from a snapshot. Values are
// set once on fresh metrics: a gauge is Set, a counter Incremented once from 0, a
// histogram gets all its bucket counts in one ObserveMultiple, so each reads exactly the
// snapshot's value. Help texts are plain: prometheus-cpp 1.0 does not escape them.
#include "core/metrics_exposition.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <vector>

namespace fracgpu::broker {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Labels;
using prometheus::Registry;

constexpr double kNsPerSecond = 1e9;

Family<Gauge>& gauges(Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}

Family<Counter>& counters(Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

void set(Family<Gauge>& family, const Labels& labels, double value) {
  family.Add(labels).Set(value);
}

void count(Family<Counter>& family, const Labels& labels, double value) {
  family.Add(labels).Increment(value);
}

Labels tenant_labels(const TenantSeriesLabels& l) {
  return {{"tenant", l.tenant},     {"gpu", std::to_string(l.gpu)},
          {"gpu_uuid", l.gpu_uuid}, {"namespace", l.pod.namespace_name},
          {"pod", l.pod.pod},       {"container", l.pod.container}};
}

Labels gpu_labels(const GpuMetrics& g) {
  return {{"gpu", std::to_string(g.index)}, {"gpu_uuid", g.uuid}};
}

// Per tenant and GPU: memory and compute quotas, usage and counters.
void add_tenants(Registry& r, const MetricsSnapshot& s) {
  auto& limit = gauges(r, "fracgpu_memory_limit_bytes", "Hard device-memory cap, bytes.");
  auto& request = gauges(r, "fracgpu_memory_request_bytes", "Guaranteed device memory, bytes.");
  auto& grant = gauges(r, "fracgpu_memory_grant_bytes",
                       "Device memory usable without asking the broker "
                       "(request <= grant <= limit), bytes.");
  auto& used = gauges(r, "fracgpu_memory_used_bytes",
                      "Device memory held by the tenant's live processes, bytes.");
  auto& peak = gauges(r, "fracgpu_memory_peak_bytes", "High-water mark of used memory, bytes.");
  auto& swapped = gauges(r, "fracgpu_memory_swapped_bytes",
                         "Tenant memory currently moved to host memory by overcommit, bytes.");
  auto& refusals = counters(r, "fracgpu_memory_allocation_refusals_total",
                            "Allocations refused at the cap or for lack of burst memory.");
  auto& bursts = counters(r, "fracgpu_memory_burst_requests_total",
                          "Requests to the broker for memory above the grant.");
  auto& held = counters(r, "fracgpu_compute_held_seconds_total",
                        "GPU time the tenant held (charged time), seconds.");
  auto& waited = counters(r, "fracgpu_compute_wait_seconds_total",
                          "Time the tenant wanted the GPU and was not granted it, seconds.");
  auto& weight = gauges(r, "fracgpu_compute_weight", "Configured compute weight (1..10000).");
  auto& ceiling = gauges(r, "fracgpu_compute_ceiling_ratio",
                         "Hard compute ceiling as a fraction of the GPU (0 = none).");
  auto& priority =
      gauges(r, "fracgpu_compute_priority", "Priority class: 0 low, 1 normal, 2 high.");
  auto& share = gauges(r, "fracgpu_compute_share_ratio",
                       "Measured fraction of the GPU's time the tenant held over the last 2 s.");
  auto& processes = gauges(r, "fracgpu_tenant_processes",
                           "Registered live processes of the tenant using the GPU.");
  for (const TenantGpuMetrics& t : s.tenants) {
    const Labels l = tenant_labels(t.labels);
    set(limit, l, static_cast<double>(t.memory_limit));
    set(request, l, static_cast<double>(t.memory_request));
    set(grant, l, static_cast<double>(t.memory_grant));
    set(used, l, static_cast<double>(t.memory_used));
    set(peak, l, static_cast<double>(t.memory_peak));
    set(swapped, l, static_cast<double>(t.memory_swapped));
    count(refusals, l, static_cast<double>(t.allocation_refusals));
    count(bursts, l, static_cast<double>(t.burst_requests));
    set(weight, l, t.compute_weight);
    set(ceiling, l, t.compute_ceiling_pct / 100.0);
    set(priority, l, static_cast<double>(t.priority));
    set(processes, l, t.processes);
    if (t.compute) {
      count(held, l, t.compute->gpu_seconds);
      count(waited, l, t.compute->wait_seconds);
      set(share, l, t.compute->measured_share);
    }
  }
}

void add_violations(Registry& r, const MetricsSnapshot& s) {
  if (s.violations.empty()) return;
  auto& family = counters(r, "fracgpu_audit_violations_total",
                          "Findings of the broker's audit (NVML usage against the books) and "
                          "books check (quota and ledger), by kind.");
  std::size_t labelled = s.tenants.size();  // the tenant whose labels `l` holds
  Labels l;
  for (const ViolationSeries& v : s.violations) {
    if (v.tenant != labelled) {  // series come grouped by tenant: build its labels once
      labelled = v.tenant;
      l = tenant_labels(s.tenants.at(v.tenant).labels);
    }
    l["gpu"] = std::to_string(v.gpu);
    l["gpu_uuid"] = v.gpu_uuid;
    l["kind"] = violation_kind_name(v.kind);
    count(family, l, static_cast<double>(v.count));
  }
}

prometheus::Histogram::BucketBoundaries grant_wait_bounds() {
  prometheus::Histogram::BucketBoundaries bounds;
  for (int64_t ns : GrantWaitHistogram::kBoundsNs)
    bounds.push_back(static_cast<double>(ns) / kNsPerSecond);
  return bounds;
}

// Per GPU: memory, utilisation, tenants, handoffs and the grant-wait histogram.
void add_gpus(Registry& r, const MetricsSnapshot& s) {
  auto& total = gauges(r, "fracgpu_gpu_memory_total_bytes", "Device memory of the GPU, bytes.");
  auto& used = gauges(r, "fracgpu_gpu_memory_used_bytes",
                      "Device memory in use: NVML's figure when the broker reads NVML, else "
                      "the sum of the tenants' books, bytes.");
  auto& utilization =
      gauges(r, "fracgpu_gpu_utilization_ratio", "GPU utilisation reported by NVML (0..1).");
  auto& tenants = gauges(r, "fracgpu_gpu_tenants", "Tenants on the GPU.");
  auto& handoffs =
      counters(r, "fracgpu_gpu_handoffs_total", "Grants handed from one tenant to another.");
  auto& waits = prometheus::BuildHistogram()
                    .Name("fracgpu_gpu_grant_wait_seconds")
                    .Help("Time from a tenant asking for the GPU to its grant, seconds.")
                    .Register(r);
  const auto bounds = grant_wait_bounds();
  for (const GpuMetrics& g : s.gpus) {
    const Labels l = gpu_labels(g);
    set(total, l, static_cast<double>(g.memory_total));
    set(used, l, static_cast<double>(g.memory_used));
    if (g.utilization) set(utilization, l, *g.utilization);
    set(tenants, l, g.tenants);
    count(handoffs, l, static_cast<double>(g.compute.handoffs));
    const GrantWaitHistogram& h = g.compute.grant_waits;
    const std::vector<double> buckets(h.counts.begin(), h.counts.end());
    waits.Add(l, bounds).ObserveMultiple(buckets, static_cast<double>(h.sum_ns) / kNsPerSecond);
  }
}

void add_node(Registry& r, const MetricsSnapshot& s) {
  set(gauges(r, "fracgpu_build_info", "The broker's version (value 1)."), {{"version", s.version}},
      1);
  set(gauges(r, "fracgpu_broker_up", "1 while the broker serves."), {}, 1);
  if (!s.audit_cost) return;
  auto& seconds = counters(r, "fracgpu_audit_duration_seconds_total",
                           "Broker time spent in the audit (part nvml: per-process NVML usage "
                           "against the books; part books: quota and ledger check), seconds.");
  auto& passes = counters(r, "fracgpu_audit_passes_total", "Audit passes run, by part.");
  count(seconds, {{"part", "nvml"}}, s.audit_cost->nvml_seconds);
  count(seconds, {{"part", "books"}}, s.audit_cost->books_seconds);
  count(passes, {{"part", "nvml"}}, static_cast<double>(s.audit_cost->nvml_passes));
  count(passes, {{"part", "books"}}, static_cast<double>(s.audit_cost->books_passes));
}

}  // namespace

std::unique_ptr<Registry> build_metrics_registry(const MetricsSnapshot& snapshot) {
  auto registry = std::make_unique<Registry>();
  add_tenants(*registry, snapshot);
  add_violations(*registry, snapshot);
  add_gpus(*registry, snapshot);
  add_node(*registry, snapshot);
  return registry;
}

std::string serialize_metrics(const Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

std::string render_metrics(const MetricsSnapshot& snapshot) {
  return serialize_metrics(*build_metrics_registry(snapshot));
}

}  // namespace fracgpu::broker
