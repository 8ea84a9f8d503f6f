// Rendering of broker state as protocol JSON and as Prometheus metrics. Metric names
// follow Prometheus conventions (base units, _bytes / _total suffixes); labels are the
// tenant name, the GPU's host index and its UUID, which are all safe label values
// (validated names, hex UUIDs), so no escaping is needed beyond the UUID we format.
#include "core/status_report.h"

#include <sstream>

#include "core/admission.h"
#include "core/ledger_ops.h"

namespace fracgpu::broker {
namespace {

nlohmann::json device_status(const DeviceSpec& spec, const DeviceQuota& q, const DeviceUsage& u) {
  nlohmann::json j = tenant_spec_to_json(TenantSpec{"x", {spec}})["devices"][0];
  j["memory_used"] = u.used.load();
  j["memory_peak"] = u.peak.load();
  j["memory_grant"] = q.memory_grant.load();
  j["oom_events"] = u.oom_events.load();
  j["burst_requests"] = u.burst_requests.load();
  j["context_footprint"] = q.context_footprint.load();
  return j;
}

nlohmann::json processes_json(const TenantLedger& ledger, std::size_t device_count) {
  nlohmann::json list = nlohmann::json::array();
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (static_cast<SlotState>(s.state.load()) != SlotState::kLive) continue;
    nlohmann::json used = nlohmann::json::array();
    for (std::size_t d = 0; d < device_count; ++d) used.push_back(s.used[d].load());
    list.push_back({{"pid", s.pid.load()}, {"slot", i}, {"memory_used", std::move(used)}});
  }
  return list;
}

struct Sample {
  const char* name;
  const char* help;
  const char* type;
};

}  // namespace

nlohmann::json gpu_json(const GpuInfo& gpu, uint64_t reserve) {
  return {{"index", gpu.index},
          {"uuid", gpu.uuid},
          {"name", gpu.name},
          {"memory_total", gpu.memory_total},
          {"memory_capacity", gpu_capacity(gpu, reserve)},
          {"context_footprint", gpu.context_footprint}};
}

nlohmann::json gpus_json(const GpuInventory& gpus, uint64_t reserve) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& g : gpus.gpus) list.push_back(gpu_json(g, reserve));
  return list;
}

nlohmann::json tenant_status_json(Tenant& tenant, const ComputeService* compute,
                                  const AuditService* audit) {
  nlohmann::json j = tenant_spec_to_json(tenant.spec);
  nlohmann::json devices = nlohmann::json::array();
  for (std::size_t i = 0; i < tenant.spec.devices.size() && i < kMaxDevices; ++i) {
    const DeviceSpec& spec = tenant.spec.devices[i];
    nlohmann::json d = device_status(spec, tenant.quota().devices[i], tenant.ledger().devices[i]);
    if (compute != nullptr) {
      if (auto c = compute->status(tenant.spec.name, spec.gpu)) {
        d["compute_state"] = c->state;
        d["compute_measured_share"] = c->measured_share;
        d["compute_gpu_seconds"] = c->gpu_seconds;
      }
    }
    devices.push_back(std::move(d));
  }
  j["devices"] = std::move(devices);
  j["socket"] = tenant.socket_path().string();
  j["run_dir"] = tenant.dir.string();
  j["processes"] = processes_json(tenant.ledger(), tenant.spec.devices.size());
  if (audit != nullptr) j["violations"] = audit->tenant_json(tenant.spec.name);
  return j;
}

// Compute gauges and counters per tenant and GPU (absent without a scheduler).
static void compute_metrics(std::ostringstream& out, TenantRegistry& registry,
                            const ComputeService& compute) {
  out << "# HELP fracgpu_compute_weight Compute share weight of the tenant on the GPU.\n"
         "# TYPE fracgpu_compute_weight gauge\n";
  for (Tenant* t : registry.all())
    for (const auto& d : t->spec.devices)
      out << "fracgpu_compute_weight{tenant=\"" << t->spec.name << "\",gpu=\"" << d.gpu << "\"} "
          << d.compute << '\n';
  out << "# HELP fracgpu_compute_share Fraction of the GPU's time the tenant held over the last 2 "
         "s.\n"
         "# TYPE fracgpu_compute_share gauge\n";
  for (Tenant* t : registry.all())
    for (const auto& d : t->spec.devices)
      if (auto c = compute.status(t->spec.name, d.gpu))
        out << "fracgpu_compute_share{tenant=\"" << t->spec.name << "\",gpu=\"" << d.gpu << "\"} "
            << c->measured_share << '\n';
  out << "# HELP fracgpu_compute_seconds_total GPU time the tenant held on the GPU.\n"
         "# TYPE fracgpu_compute_seconds_total counter\n";
  for (Tenant* t : registry.all())
    for (const auto& d : t->spec.devices)
      if (auto c = compute.status(t->spec.name, d.gpu))
        out << "fracgpu_compute_seconds_total{tenant=\"" << t->spec.name << "\",gpu=\"" << d.gpu
            << "\"} " << c->gpu_seconds << '\n';
}

std::string metrics_text(TenantRegistry& registry, const ComputeService* compute,
                         const AuditService* audit) {
  static constexpr Sample kSamples[] = {
      {"fracgpu_memory_limit_bytes", "Hard device-memory cap of the tenant on the GPU.", "gauge"},
      {"fracgpu_memory_request_bytes", "Guaranteed device memory of the tenant on the GPU.",
       "gauge"},
      {"fracgpu_memory_grant_bytes", "Device memory the tenant may use without asking the broker.",
       "gauge"},
      {"fracgpu_memory_used_bytes", "Device memory held by the tenant's live processes.", "gauge"},
      {"fracgpu_memory_peak_bytes", "High-water mark of the tenant's device memory.", "gauge"},
      {"fracgpu_oom_events_total", "Allocations refused at the tenant's cap.", "counter"},
      {"fracgpu_burst_requests_total", "Requests for memory above the grant.", "counter"},
  };
  std::ostringstream out;
  auto tenants = registry.all();
  for (std::size_t k = 0; k < std::size(kSamples); ++k) {
    out << "# HELP " << kSamples[k].name << ' ' << kSamples[k].help << "\n# TYPE "
        << kSamples[k].name << ' ' << kSamples[k].type << '\n';
    for (Tenant* t : tenants) {
      for (std::size_t i = 0; i < t->spec.devices.size() && i < kMaxDevices; ++i) {
        const DeviceQuota& q = t->quota().devices[i];
        const DeviceUsage& u = t->ledger().devices[i];
        const uint64_t values[] = {
            q.memory_limit.load(), q.memory_request.load(), q.memory_grant.load(),  u.used.load(),
            u.peak.load(),         u.oom_events.load(),     u.burst_requests.load()};
        out << kSamples[k].name << "{tenant=\"" << t->spec.name << "\",gpu=\""
            << t->spec.devices[i].gpu << "\",uuid=\"" << q.uuid << "\"} " << values[k] << '\n';
      }
    }
  }
  out << "# HELP fracgpu_tenant_processes Registered live processes of the tenant.\n"
         "# TYPE fracgpu_tenant_processes gauge\n";
  for (Tenant* t : tenants) {
    out << "fracgpu_tenant_processes{tenant=\"" << t->spec.name << "\"} "
        << ledger::live_process_count(t->ledger()) << '\n';
  }
  out << "# HELP fracgpu_gpu_memory_total_bytes Device memory of the GPU.\n"
         "# TYPE fracgpu_gpu_memory_total_bytes gauge\n";
  for (const auto& g : registry.gpus().gpus) {
    out << "fracgpu_gpu_memory_total_bytes{gpu=\"" << g.index << "\",uuid=\"" << g.uuid << "\"} "
        << g.memory_total << '\n';
  }
  if (compute != nullptr) compute_metrics(out, registry, *compute);
  if (audit != nullptr) audit->write_metrics(out, registry);
  return out.str();
}

}  // namespace fracgpu::broker
