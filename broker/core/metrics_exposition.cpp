// Families of the metrics contract (docs/monitoring.md) built from a snapshot as
// prometheus::MetricFamily values. A gauge's or counter's value is the snapshot's value; a
// histogram's buckets are the scheduler's counts made cumulative, +Inf last, as
// prometheus::Histogram::Collect gives them. A family with no series is left out, as
// Registry leaves out a family nothing was added to. Help texts are plain: prometheus-cpp
// 1.0 does not escape them.
// Cost: one ClientMetric per series, its labels copied from the tenant's label vector
// built once per tenant and GPU (no hashing, no per-series metric objects).
#include "core/metrics_exposition.h"

#include <prometheus/text_serializer.h>

#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

namespace fracgpu::broker {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using LabelList = std::vector<ClientMetric::Label>;

constexpr double kNsPerSecond = 1e9;
constexpr std::size_t kTypicalLineBytes = 256;

MetricFamily family(const char* name, const char* help, MetricType type, std::size_t series) {
  MetricFamily f{name, help, type, {}};
  f.metric.reserve(series);
  return f;
}

void add(MetricFamily& f, const LabelList& labels, double value) {
  ClientMetric& m = f.metric.emplace_back();
  m.label = labels;
  if (f.type == MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
}

// Sorted by label name, as Registry's std::map<std::string, std::string> Labels are.
LabelList tenant_labels(const TenantSeriesLabels& l) {
  return {{"container", l.pod.container},
          {"gpu", std::to_string(l.gpu)},
          {"gpu_uuid", l.gpu_uuid},
          {"namespace", l.pod.namespace_name},
          {"pod", l.pod.pod},
          {"tenant", l.tenant}};
}

LabelList gpu_labels(const GpuMetrics& g) {
  return {{"gpu", std::to_string(g.index)}, {"gpu_uuid", g.uuid}};
}

// The families in contract order. Room for all of them is reserved up front, so the
// reference open() returns stays valid while later families are opened.
class FamilyList {
 public:
  static constexpr std::size_t kMaxFamilies = 32;
  FamilyList() { list_.reserve(kMaxFamilies); }
  MetricFamily& open(const char* name, const char* help, MetricType type, std::size_t series) {
    return list_.emplace_back(family(name, help, type, series));
  }
  // Drops the families nothing was added to; the list to serialise.
  std::vector<MetricFamily> take() && {
    std::erase_if(list_, [](const MetricFamily& f) { return f.metric.empty(); });
    return std::move(list_);
  }
  std::size_t size() const { return list_.size(); }
  MetricFamily& operator[](std::size_t i) { return list_[i]; }

 private:
  std::vector<MetricFamily> list_;
};

// Per tenant and GPU: memory and compute quotas, usage and counters.
void add_tenants(FamilyList& out, const MetricsSnapshot& s) {
  const std::size_t n = s.tenants.size();
  const std::size_t first = out.size();
  auto gauge = [&](const char* name, const char* help) {
    out.open(name, help, MetricType::Gauge, n);
  };
  auto counter = [&](const char* name, const char* help) {
    out.open(name, help, MetricType::Counter, n);
  };
  gauge("fracgpu_memory_limit_bytes", "Hard device-memory cap, bytes.");
  gauge("fracgpu_memory_request_bytes", "Guaranteed device memory, bytes.");
  gauge("fracgpu_memory_grant_bytes",
        "Device memory usable without asking the broker (request <= grant <= limit), bytes.");
  gauge("fracgpu_memory_used_bytes", "Device memory held by the tenant's live processes, bytes.");
  gauge("fracgpu_memory_peak_bytes", "High-water mark of used memory, bytes.");
  gauge("fracgpu_memory_swapped_bytes",
        "Tenant memory currently moved to host memory by overcommit, bytes.");
  gauge("fracgpu_memory_host_reserved_bytes",
        "Pinned host memory the tenant's processes hold empty, ready for a swap-out, bytes.");
  counter("fracgpu_memory_allocation_refusals_total",
          "Allocations refused at the cap or for lack of burst memory.");
  counter("fracgpu_memory_burst_requests_total",
          "Requests to the broker for memory above the grant.");
  counter("fracgpu_compute_held_seconds_total",
          "GPU time the tenant held (charged time), seconds.");
  counter("fracgpu_compute_wait_seconds_total",
          "Time the tenant wanted the GPU and was not granted it, seconds.");
  gauge("fracgpu_compute_weight", "Configured compute weight (1..10000).");
  gauge("fracgpu_compute_ceiling_ratio",
        "Hard compute ceiling as a fraction of the GPU (0 = none).");
  gauge("fracgpu_compute_priority", "Priority class: 0 low, 1 normal, 2 high.");
  gauge("fracgpu_compute_share_ratio",
        "Measured fraction of the GPU's time the tenant held over the last 2 s.");
  gauge("fracgpu_tenant_processes", "Registered live processes of the tenant using the GPU.");
  enum : std::size_t {
    kLimit,
    kRequest,
    kGrant,
    kUsed,
    kPeak,
    kSwapped,
    kHostReserved,
    kRefusals,
    kBursts,
    kHeld,
    kWaited,
    kWeight,
    kCeiling,
    kPriority,
    kShare,
    kProcesses
  };
  auto at = [&](std::size_t which) -> MetricFamily& { return out[first + which]; };
  for (const TenantGpuMetrics& t : s.tenants) {
    const LabelList l = tenant_labels(t.labels);
    add(at(kLimit), l, static_cast<double>(t.memory_limit));
    add(at(kRequest), l, static_cast<double>(t.memory_request));
    add(at(kGrant), l, static_cast<double>(t.memory_grant));
    add(at(kUsed), l, static_cast<double>(t.memory_used));
    add(at(kPeak), l, static_cast<double>(t.memory_peak));
    add(at(kSwapped), l, static_cast<double>(t.memory_swapped));
    add(at(kHostReserved), l, static_cast<double>(t.memory_host_reserved));
    add(at(kRefusals), l, static_cast<double>(t.allocation_refusals));
    add(at(kBursts), l, static_cast<double>(t.burst_requests));
    add(at(kWeight), l, t.compute_weight);
    add(at(kCeiling), l, t.compute_ceiling_pct / 100.0);
    add(at(kPriority), l, static_cast<double>(t.priority));
    add(at(kProcesses), l, t.processes);
    if (t.compute) {
      add(at(kHeld), l, t.compute->gpu_seconds);
      add(at(kWaited), l, t.compute->wait_seconds);
      add(at(kShare), l, t.compute->measured_share);
    }
  }
}

void add_violations(FamilyList& out, const MetricsSnapshot& s) {
  MetricFamily& f = out.open("fracgpu_audit_violations_total",
                             "Findings of the broker's audit (NVML usage against the books) and "
                             "books check (quota and ledger), by kind.",
                             MetricType::Counter, s.violations.size());
  std::size_t labelled = s.tenants.size();  // the tenant whose labels `base` holds
  LabelList base;
  for (const ViolationSeries& v : s.violations) {
    if (v.tenant != labelled) {  // series come grouped by tenant: build its labels once
      labelled = v.tenant;
      base = tenant_labels(s.tenants.at(v.tenant).labels);
    }
    // container, gpu, gpu_uuid, kind, namespace, pod, tenant
    LabelList l;
    l.reserve(7);
    l.push_back(base[0]);
    l.push_back({"gpu", std::to_string(v.gpu)});
    l.push_back({"gpu_uuid", v.gpu_uuid});
    l.push_back({"kind", violation_kind_name(v.kind)});
    l.insert(l.end(), base.begin() + 3, base.end());
    ClientMetric& m = f.metric.emplace_back();
    m.label = std::move(l);
    m.counter.value = static_cast<double>(v.count);
  }
}

ClientMetric::Histogram grant_waits(const GrantWaitHistogram& h) {
  ClientMetric::Histogram out;
  out.bucket.reserve(h.counts.size());
  uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const double bound = i < GrantWaitHistogram::kBoundsNs.size()
                             ? static_cast<double>(GrantWaitHistogram::kBoundsNs[i]) / kNsPerSecond
                             : std::numeric_limits<double>::infinity();
    out.bucket.push_back({cumulative, bound});
  }
  out.sample_count = cumulative;
  out.sample_sum = static_cast<double>(h.sum_ns) / kNsPerSecond;
  return out;
}

// Per GPU: memory, utilisation, tenants, handoffs and the grant-wait histogram.
void add_gpus(FamilyList& out, const MetricsSnapshot& s) {
  const std::size_t n = s.gpus.size();
  MetricFamily& total = out.open("fracgpu_gpu_memory_total_bytes",
                                 "Device memory of the GPU, bytes.", MetricType::Gauge, n);
  MetricFamily& used = out.open("fracgpu_gpu_memory_used_bytes",
                                "Device memory in use: NVML's figure when the broker reads NVML, "
                                "else the sum of the tenants' books, bytes.",
                                MetricType::Gauge, n);
  MetricFamily& utilization =
      out.open("fracgpu_gpu_utilization_ratio", "GPU utilisation reported by NVML (0..1).",
               MetricType::Gauge, n);
  MetricFamily& outside = out.open(
      "fracgpu_gpu_memory_outside_bytes",
      "Device memory held outside every tenant (processes in no tenant, and NVML's device used "
      "beyond what its processes hold), kept out of what is lent or guaranteed, bytes.",
      MetricType::Gauge, n);
  MetricFamily& outside_violations =
      out.open("fracgpu_gpu_outside_violations_total",
               "Processes found holding memory on the GPU in no tenant, on a node meant for "
               "fracgpu tenants only (--fracgpu-only).",
               MetricType::Counter, n);
  MetricFamily& tenants =
      out.open("fracgpu_gpu_tenants", "Tenants on the GPU.", MetricType::Gauge, n);
  MetricFamily& handoffs =
      out.open("fracgpu_gpu_handoffs_total", "Grants handed from one tenant to another.",
               MetricType::Counter, n);
  MetricFamily& waits = out.open("fracgpu_gpu_grant_wait_seconds",
                                 "Time from a tenant asking for the GPU to its grant, seconds.",
                                 MetricType::Histogram, n);
  for (const GpuMetrics& g : s.gpus) {
    const LabelList l = gpu_labels(g);
    add(total, l, static_cast<double>(g.memory_total));
    add(used, l, static_cast<double>(g.memory_used));
    if (g.utilization) add(utilization, l, *g.utilization);
    if (g.memory_outside) add(outside, l, static_cast<double>(*g.memory_outside));
    add(outside_violations, l, static_cast<double>(g.outside_violations));
    add(tenants, l, g.tenants);
    add(handoffs, l, static_cast<double>(g.compute.handoffs));
    ClientMetric& m = waits.metric.emplace_back();
    m.label = l;
    m.histogram = grant_waits(g.compute.grant_waits);
  }
}

void add_node(FamilyList& out, const MetricsSnapshot& s) {
  add(out.open("fracgpu_build_info", "The broker's version (value 1).", MetricType::Gauge, 1),
      {{"version", s.version}}, 1);
  add(out.open("fracgpu_broker_up", "1 while the broker serves.", MetricType::Gauge, 1), {}, 1);
  if (!s.audit_cost) return;
  MetricFamily& seconds =
      out.open("fracgpu_audit_duration_seconds_total",
               "Broker time spent in the audit (part nvml: per-process NVML usage against the "
               "books; part books: quota and ledger check), seconds.",
               MetricType::Counter, 2);
  add(seconds, {{"part", "nvml"}}, s.audit_cost->nvml_seconds);
  add(seconds, {{"part", "books"}}, s.audit_cost->books_seconds);
  MetricFamily& passes =
      out.open("fracgpu_audit_passes_total", "Audit passes run, by part.", MetricType::Counter, 2);
  add(passes, {{"part", "nvml"}}, static_cast<double>(s.audit_cost->nvml_passes));
  add(passes, {{"part", "books"}}, static_cast<double>(s.audit_cost->books_passes));
}

std::string serialize(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

uint64_t value_bits(const MetricFamily& f, const ClientMetric& m) {
  const double v = f.type == MetricType::Counter ? m.counter.value
                   : f.type == MetricType::Gauge ? m.gauge.value
                                                 : m.untyped.value;
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

bool one_line_per_series(const MetricFamily& f) {
  return f.type == MetricType::Counter || f.type == MetricType::Gauge ||
         f.type == MetricType::Untyped;
}

}  // namespace

std::vector<MetricFamily> SnapshotCollectable::Collect() const {
  FamilyList out;
  add_tenants(out, snapshot_);
  add_violations(out, snapshot_);
  add_gpus(out, snapshot_);
  add_node(out, snapshot_);
  return std::move(out).take();
}

std::string serialize_metrics(const std::vector<MetricFamily>& families) {
  std::size_t series = 0;
  for (const MetricFamily& f : families) series += f.metric.size();
  std::string buffer;
  buffer.reserve(series * kTypicalLineBytes);
  std::ostringstream out(std::move(buffer));  // C++20: starts from the reserved string
  prometheus::TextSerializer().Serialize(out, families);
  return std::move(out).str();
}

// The cached line of the series at the cursor, when its labels are m's: the series come
// in the same order every scrape (tenants as the registry lists them), so the cursor
// walks the previous scrape's series alongside; a series that went away (a deleted
// tenant) is skipped by looking a few entries ahead.
const ExpositionCache::Line* ExpositionCache::match(const std::vector<Line>& previous,
                                                    std::size_t& cursor, const ClientMetric& m) {
  for (std::size_t k = cursor; k < previous.size() && k < cursor + kLookAhead; ++k) {
    if (previous[k].labels == m.label) {
      cursor = k + 1;
      return &previous[k];
    }
  }
  return nullptr;
}

void ExpositionCache::render_family(const MetricFamily& family, std::string& out) {
  if (!one_line_per_series(family) || family.metric.empty()) {
    out += serialize({family});  // histograms and summaries: a few, whole
    return;
  }
  FamilyCache& cache = families_[family.name];
  if (cache.header.empty())
    cache.header = serialize({MetricFamily{family.name, family.help, family.type, {}}});
  std::vector<Line> next(family.metric.size());
  MetricFamily changed{family.name, family.help, family.type, {}};
  std::vector<std::size_t> changed_at;
  std::size_t cursor = 0;
  for (std::size_t i = 0; i < family.metric.size(); ++i) {
    const ClientMetric& m = family.metric[i];
    Line& line = next[i];
    line.value_bits = value_bits(family, m);
    const Line* old = match(cache.lines, cursor, m);
    if (old != nullptr && old->value_bits == line.value_bits) {
      line.text = old->text;
      ++reused_;
    } else {
      changed.metric.push_back(m);
      changed_at.push_back(i);
      ++serialized_;
    }
  }
  if (!changed.metric.empty()) {
    const std::string text = serialize({changed});
    // The header, then exactly one line per changed series; anything else (a serializer
    // that writes differently) falls back to the whole family, uncached.
    std::size_t at = text.compare(0, cache.header.size(), cache.header) == 0 ? cache.header.size()
                                                                             : text.size() + 1;
    std::size_t k = 0;
    while (at < text.size() && k < changed_at.size()) {
      const std::size_t nl = text.find('\n', at);
      if (nl == std::string::npos) break;
      next[changed_at[k++]].text.assign(text, at, nl + 1 - at);
      at = nl + 1;
    }
    if (at != text.size() || k != changed_at.size()) {
      cache.lines.clear();
      out += serialize({family});
      return;
    }
  }
  out += cache.header;
  for (std::size_t i = 0; i < next.size(); ++i) {
    out += next[i].text;
    next[i].labels = family.metric[i].label;
  }
  cache.lines = std::move(next);
}

std::string ExpositionCache::render(const std::vector<MetricFamily>& families) {
  std::size_t bytes = 0;
  for (const MetricFamily& f : families) {
    auto it = families_.find(f.name);
    bytes += it == families_.end()
                 ? 0
                 : it->second.header.size() + it->second.lines.size() * kTypicalLineBytes;
  }
  std::string out;
  out.reserve(bytes);
  for (const MetricFamily& f : families) render_family(f, out);
  // Families absent this time (no series) forget their lines.
  for (auto it = families_.begin(); it != families_.end();) {
    bool present = false;
    for (const MetricFamily& f : families) present |= f.name == it->first;
    it = present ? std::next(it) : families_.erase(it);
  }
  return out;
}

std::string render_metrics(const MetricsSnapshot& snapshot) {
  return serialize_metrics(SnapshotCollectable(snapshot).Collect());
}

std::string render_metrics(const MetricsSnapshot& snapshot, ExpositionCache& cache) {
  return cache.render(SnapshotCollectable(snapshot).Collect());
}

}  // namespace fracgpu::broker
