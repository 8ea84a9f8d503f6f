// Rendering of broker state as protocol JSON (the status of tenants and GPUs).
#include "core/status_report.h"

#include "core/admission.h"
#include "core/ledger_ops.h"
#include "core/swap_books.h"
#include "fracgpu/ledger_protocol.h"

namespace fracgpu::broker {
namespace {

nlohmann::json device_status(const DeviceSpec& spec, const DeviceQuota& q, const DeviceUsage& u) {
  nlohmann::json j = tenant_spec_to_json(TenantSpec{"x", {spec}})["devices"][0];
  j["memory_used"] = u.used.load();
  // On host (swap; tenant_segment.h minor 3) as the broker counts it: at most what it let the
  // tenant move there (host_allowance, minor 7; swap_books.h).
  j["memory_swapped"] = booked_on_host(q, u);
  j["host_allowance"] = q.host_allowance.load();
  j["host_reserve"] = q.host_reserve.load();  // the swap reserve it may hold for here (minor 6)
  j["memory_peak"] = u.peak.load();
  j["memory_grant"] = q.memory_grant.load();
  j["oom_events"] = u.oom_events.load();
  j["burst_requests"] = u.burst_requests.load();
  j["context_footprint"] = q.context_footprint.load();
  return j;
}

nlohmann::json processes_json(const TenantLedger& ledger, std::size_t device_count) {
  const bool reserves = ledger_has_host_reserved(ledger.size);
  nlohmann::json list = nlohmann::json::array();
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = ledger.processes[i];
    if (static_cast<SlotState>(s.state.load()) != SlotState::kLive) continue;
    nlohmann::json used = nlohmann::json::array();
    for (std::size_t d = 0; d < device_count; ++d) used.push_back(s.used[d].load());
    list.push_back({{"pid", s.pid.load()},
                    {"slot", i},
                    {"memory_used", std::move(used)},
                    {"host_reserved", reserves ? ledger.host_reserved[i].load() : 0}});
  }
  return list;
}

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
  // The swap reserve (tenant_segment.h minor 6): what the broker lets the tenant's processes
  // keep pinned, over its GPUs, and what they hold now (pinned host memory, beside what
  // memory_swapped counts on host).
  uint64_t reserve = 0;
  for (std::size_t i = 0; i < tenant.spec.devices.size() && i < kMaxDevices; ++i)
    reserve += tenant.quota().devices[i].host_reserve.load();
  j["host_reserve"] = reserve;
  j["host_reserved"] = ledger_protocol::live_host_reserved(tenant.ledger());
  j["socket"] = tenant.socket_path().string();
  j["run_dir"] = tenant.dir.string();
  j["processes"] = processes_json(tenant.ledger(), tenant.spec.devices.size());
  if (audit != nullptr) j["violations"] = audit->tenant_json(tenant.spec.name);
  return j;
}

}  // namespace fracgpu::broker
