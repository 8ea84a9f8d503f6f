// The admission rules of admission.h, checked GPU by GPU in the order the tenant lists
// them so that the first problem found is the one reported.
#include "core/admission.h"

#include <spdlog/spdlog.h>

#include "core/quantity_parser.h"

namespace fracgpu::broker {
namespace {

std::string no_such_gpu(uint32_t index, const GpuInventory& gpus) {
  if (gpus.gpus.empty()) {
    return "no GPU is available on this node" +
           (gpus.problem.empty() ? std::string() : " (" + gpus.problem + ")");
  }
  return "GPU " + std::to_string(index) + " does not exist on this node (it has " +
         std::to_string(gpus.gpus.size()) + " GPU" + (gpus.gpus.size() == 1 ? "" : "s") +
         ", numbered from 0)";
}

uint64_t others_requests(std::span<const TenantSpec* const> others, uint32_t gpu) {
  uint64_t sum = 0;
  for (const TenantSpec* t : others) {
    if (const DeviceSpec* d = t->find_gpu(gpu)) sum += d->memory_request;
  }
  return sum;
}

std::string does_not_fit(uint64_t request, const std::string& g, uint64_t taken, uint64_t cap) {
  return "memory request " + format_size(request) + " does not fit on " + g + ": " +
         format_size(taken) + " of its " + format_size(cap) +
         " are already guaranteed to other tenants (lower the request, or the other tenants')";
}

// A tenant created with "memory_limit":"available" gets what no other tenant is
// guaranteed, as it is now: the capacity minus the others' requests.
Status fill_available_limit(DeviceSpec& d, const std::string& g, uint64_t cap, uint64_t taken) {
  if (taken >= cap) {
    return Status::failure(
        "no memory of " + g + " is left for a tenant without a memory limit: all of its " +
        format_size(cap) + " are guaranteed to other tenants (give a memory limit)");
  }
  if (d.memory_request > cap - taken)
    return Status::failure(does_not_fit(d.memory_request, g, taken, cap));
  d.memory_limit = cap - taken;
  spdlog::info(
      "memory limit on {} set to {}: the memory no other tenant is guaranteed ({} capacity, {} "
      "guaranteed)",
      g, format_size(d.memory_limit), format_size(cap), format_size(taken));
  return {};
}

Status admit_device(DeviceSpec& d, const GpuInfo& gpu, uint64_t reserve,
                    std::span<const TenantSpec* const> others) {
  const uint64_t cap = gpu_capacity(gpu, reserve);
  const std::string g = "GPU " + std::to_string(gpu.index);
  const std::string cap_text = format_size(cap) + " (" + format_size(gpu.memory_total) +
                               " total, " + format_size(reserve) + " reserved)";
  const uint64_t taken = others_requests(others, gpu.index);
  if (d.memory_limit == kMemoryLimitAvailable) {
    if (auto s = fill_available_limit(d, g, cap, taken); !s) return s;
  }
  if (d.memory_limit > cap) {
    return Status::failure("memory limit " + format_size(d.memory_limit) + " is larger than " + g +
                           "'s capacity of " + cap_text);
  }
  if (d.memory_request > d.memory_limit) {
    return Status::failure("memory request " + format_size(d.memory_request) +
                           " is larger than the memory limit " + format_size(d.memory_limit));
  }
  if (taken > cap || d.memory_request > cap - taken) {
    return Status::failure(does_not_fit(d.memory_request, g, taken, cap));
  }
  if (d.memory_limit < gpu.context_footprint) {
    spdlog::warn(
        "memory limit {} on {} is below one CUDA context ({}); the tenant cannot create a context",
        format_size(d.memory_limit), g, format_size(gpu.context_footprint));
  }
  d.uuid = gpu.uuid;
  return {};
}

}  // namespace

uint64_t gpu_capacity(const GpuInfo& gpu, uint64_t reserve) {
  return gpu.memory_total > reserve ? gpu.memory_total - reserve : 0;
}

Status admit_tenant(TenantSpec& spec, const GpuInventory& gpus, uint64_t reserve,
                    std::span<const TenantSpec* const> others) {
  if (spec.devices.empty()) return Status::failure("a tenant needs at least one GPU");
  for (DeviceSpec& d : spec.devices) {
    const GpuInfo* gpu = gpus.find(d.gpu);
    if (gpu == nullptr) return Status::failure(no_such_gpu(d.gpu, gpus));
    if (auto s = admit_device(d, *gpu, reserve, others); !s) return s;
  }
  return {};
}

}  // namespace fracgpu::broker
