// OutsideBooks and the admission check beside the memory outside every tenant
// (outside_usage.h).
#include "core/outside_usage.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/admission.h"
#include "core/quantity_parser.h"
#include "core/violation_log.h"

namespace fracgpu::broker {
namespace {

// Saturating: figures come from NVML, whatever they are.
uint64_t add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

}  // namespace

std::vector<OutsideViolation> OutsideBooks::update(uint32_t gpu, const std::string& uuid,
                                                   std::vector<GpuProcessUsage> outside,
                                                   uint64_t listed_bytes,
                                                   std::optional<uint64_t> device_used,
                                                   std::chrono::system_clock::time_point now) {
  // A process NVML cannot size still holds something (a context at least); it counts as a
  // process outside, its bytes as unknown (0), and the driver's figure covers them.
  std::erase_if(outside, [](const GpuProcessUsage& p) { return p.pid <= 0; });
  std::sort(outside.begin(), outside.end(), [](const GpuProcessUsage& a, const GpuProcessUsage& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.pid < b.pid;
  });
  OutsideGpu g;
  g.known = true;
  for (const GpuProcessUsage& p : outside) g.process_bytes = add(g.process_bytes, p.bytes);
  if (device_used && *device_used > listed_bytes) g.driver_bytes = *device_used - listed_bytes;
  g.processes = std::move(outside);

  std::vector<OutsideViolation> started;
  std::set<std::pair<uint32_t, int32_t>> still;
  for (const GpuProcessUsage& p : g.processes) {
    const auto key = std::make_pair(gpu, p.pid);
    still.insert(key);
    if (!fracgpu_only_ || episodes_.count(key) != 0) continue;
    OutsideViolation v{now,
                       gpu,
                       uuid,
                       p.pid,
                       p.bytes,
                       "pid " + std::to_string(p.pid) + " holds " +
                           (p.bytes_known ? format_size(p.bytes) : std::string("device memory")) +
                           " on GPU " + std::to_string(gpu) +
                           " in no tenant, on a node meant for fracgpu tenants only "
                           "(--fracgpu-only): that memory is kept out of what is lent or "
                           "guaranteed"};
    spdlog::warn("violation (outside): {}", v.detail);
    ++counts_[gpu];
    recent_.push_back(v);
    if (recent_.size() > kRecent) recent_.pop_front();
    started.push_back(std::move(v));
  }
  // An episode ends when its process no longer holds memory on that GPU.
  std::erase_if(episodes_, [&](const auto& e) { return e.first == gpu && still.count(e) == 0; });
  episodes_.insert(still.begin(), still.end());
  gpus_[gpu] = std::move(g);
  return started;
}

uint64_t OutsideBooks::bytes(uint32_t gpu) const {
  auto it = gpus_.find(gpu);
  return it == gpus_.end() ? 0 : it->second.total();
}

const OutsideGpu* OutsideBooks::gpu(uint32_t gpu) const {
  auto it = gpus_.find(gpu);
  return it == gpus_.end() ? nullptr : &it->second;
}

uint64_t OutsideBooks::violations(uint32_t gpu) const {
  auto it = counts_.find(gpu);
  return it == counts_.end() ? 0 : it->second;
}

std::string OutsideBooks::describe(uint32_t gpu) const {
  const OutsideGpu* g = this->gpu(gpu);
  if (g == nullptr || g->total() == 0) return {};
  std::string who;
  for (std::size_t i = 0; i < g->processes.size() && i < 3; ++i)
    who += (who.empty() ? "" : ", ") + std::string("pid ") + std::to_string(g->processes[i].pid) +
           " " + format_size(g->processes[i].bytes);
  if (g->processes.size() > 3) who += ", ...";
  if (g->driver_bytes > 0)
    who += (who.empty() ? "" : ", ") + std::string("driver ") + format_size(g->driver_bytes);
  return format_size(g->total()) + " held outside every tenant (" + who + ")";
}

nlohmann::json OutsideBooks::gpu_json(uint32_t gpu) const {
  const OutsideGpu* g = this->gpu(gpu);
  nlohmann::json j = {{"known", g != nullptr}};
  if (g != nullptr) {
    nlohmann::json list = nlohmann::json::array();
    for (const GpuProcessUsage& p : g->processes)
      list.push_back({{"pid", p.pid}, {"bytes", p.bytes}, {"bytes_known", p.bytes_known}});
    j["bytes"] = g->total();
    j["process_bytes"] = g->process_bytes;
    j["driver_bytes"] = g->driver_bytes;
    j["processes"] = std::move(list);
  }
  nlohmann::json recent = nlohmann::json::array();
  for (const OutsideViolation& v : recent_) {
    if (v.gpu != gpu) continue;
    recent.push_back({{"time", iso_time(v.time)},
                      {"kind", kOutsideViolationKind},
                      {"pid", v.pid},
                      {"bytes", v.bytes},
                      {"action", "logged"},
                      {"detail", v.detail}});
  }
  j["violations"] = {
      {"reported", fracgpu_only_}, {"total", violations(gpu)}, {"recent", std::move(recent)}};
  return j;
}

Status admit_beside_outside(const TenantSpec& spec, const TenantSpec* before,
                            const GpuInventory& gpus, uint64_t reserve,
                            std::span<const TenantSpec* const> others,
                            const OutsideBooks& outside) {
  for (const DeviceSpec& d : spec.devices) {
    const DeviceSpec* was = before != nullptr ? before->find_gpu(d.gpu) : nullptr;
    if (was != nullptr && d.memory_request <= was->memory_request) continue;
    if (d.memory_request == 0) continue;
    const GpuInfo* gpu = gpus.find(d.gpu);
    const uint64_t held = outside.bytes(d.gpu);
    if (gpu == nullptr || held == 0) continue;
    const uint64_t cap = gpu_capacity(*gpu, reserve);
    uint64_t taken = 0;
    for (const TenantSpec* t : others)
      if (const DeviceSpec* o = t->find_gpu(d.gpu)) taken = add(taken, o->memory_request);
    const uint64_t needed = add(add(taken, held), d.memory_request);
    if (needed <= cap) continue;
    return Status::failure(
        "memory request " + format_size(d.memory_request) + " does not fit on GPU " +
        std::to_string(d.gpu) + ": of its " + format_size(cap) + ", " + format_size(taken) +
        " are guaranteed to other tenants and " + outside.describe(d.gpu) +
        ", memory no tenant can have until those processes free it (lower the request, or stop "
        "the processes outside fracgpu)");
  }
  return {};
}

}  // namespace fracgpu::broker
