// DevicePlugin RPCs: options, the slice list stream, packing advice and Allocate.
#include "device_plugin/device_plugin_service.h"

#include <spdlog/spdlog.h>

#include "device_plugin/allocation_builder.h"
#include "device_plugin/slice_packer.h"

namespace fracgpu::k8s {
namespace {

constexpr auto kStreamWakeup = std::chrono::milliseconds(250);

v1beta1::ListAndWatchResponse device_list(const SliceInventory& inventory,
                                          const ResourceClass& cls) {
  v1beta1::ListAndWatchResponse list;
  for (const auto& slice : inventory.slices(cls)) {
    auto* device = list.add_devices();
    device->set_id(slice.id);
    device->set_health(slice.healthy ? "Healthy" : "Unhealthy");
  }
  return list;
}

std::string joined(const google::protobuf::RepeatedPtrField<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ",") + id;
  return out;
}

}  // namespace

v1beta1::DevicePluginOptions DevicePluginService::options() {
  v1beta1::DevicePluginOptions options;
  options.set_pre_start_required(true);  // pending_starts.h
  options.set_get_preferred_allocation_available(true);
  return options;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*,
                                                         const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* response) {
  *response = options();
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(
    grpc::ServerContext* context, const v1beta1::Empty*,
    grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  uint64_t sent_generation = inventory_.generation();
  auto list = device_list(inventory_, class_);
  spdlog::info("ListAndWatch {}: the kubelet is watching; sending {} slices", class_.resource_name,
               list.devices_size());
  if (!writer->Write(list)) return grpc::Status::OK;
  while (!stopping_ && !context->IsCancelled() && !inventory_.stopped()) {
    const uint64_t now = inventory_.wait_for_change(sent_generation, kStreamWakeup);
    if (now == sent_generation) continue;
    sent_generation = now;
    list = device_list(inventory_, class_);
    spdlog::info("ListAndWatch {}: the slice list changed; sending {} slices", class_.resource_name,
                 list.devices_size());
    if (!writer->Write(list)) break;
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(
    grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* request,
    v1beta1::PreferredAllocationResponse* response) {
  for (const auto& container : request->container_requests()) {
    const std::vector<std::string> available(container.available_deviceids().begin(),
                                             container.available_deviceids().end());
    const std::vector<std::string> must(container.must_include_deviceids().begin(),
                                        container.must_include_deviceids().end());
    auto chosen = prefer_slices(available, must, container.allocation_size());
    auto* answer = response->add_container_responses();
    for (auto& id : chosen) answer->add_deviceids(std::move(id));
    spdlog::debug("GetPreferredAllocation {}: {} of {} available -> {}", class_.resource_name,
                  container.allocation_size(), available.size(), joined(answer->deviceids()));
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*,
                                           const v1beta1::AllocateRequest* request,
                                           v1beta1::AllocateResponse* response) {
  for (const auto& container : request->container_requests()) {
    const std::vector<std::string> ids(container.devices_ids().begin(),
                                       container.devices_ids().end());
    auto plan = plan_allocation(ids, inventory_, class_);
    if (!plan) {
      spdlog::warn("Allocate {} refused [{}]: {}", class_.resource_name,
                   joined(container.devices_ids()), plan.error());
      return {grpc::StatusCode::INVALID_ARGUMENT, "fracgpu: " + plan.error()};
    }
    // Before the tenant: a refused Allocate must leave nothing behind in the broker.
    if (const std::string problem = host_files_problem(config_); !problem.empty()) {
      spdlog::error("Allocate {} refused [{}]: {}", class_.resource_name,
                    joined(container.devices_ids()), problem);
      return {grpc::StatusCode::FAILED_PRECONDITION, "fracgpu: " + problem};
    }
    auto ensured = ensure(*plan);  // the tenant's directory
    if (!ensured) {
      spdlog::error("Allocate failed for tenant {}: {}", plan->tenant, ensured.error());
      return failed(ensured.error());
    }
    pending_.allocated(plan->tenant);
    auto* container_response = response->add_container_responses();
    fill_container_response(*plan, ensured->dir, config_, *container_response);
    if (cdi_ != nullptr) {
      if (auto published = publish_cdi_device(*cdi_, config_.cdi_mode, *plan, ensured->dir, config_,
                                              container_response);
          !published) {
        spdlog::error("Allocate failed for tenant {}: {}", plan->tenant, published.error());
        return {grpc::StatusCode::FAILED_PRECONDITION, "fracgpu: " + published.error()};
      }
    }
    spdlog::info(
        "Allocate {}: tenant {} on GPU {} ({} of {} slices: limit {} bytes, request {} bytes, "
        "compute {}, "
        "priority {})",
        class_.resource_name, plan->tenant, plan->gpu.uuid, plan->slices.size(),
        plan->slices_per_gpu, plan->memory_limit, plan->memory_request, plan->compute,
        plan->priority);
  }
  if (on_allocated_) on_allocated_();
  return grpc::Status::OK;
}

// Right before the container is created: its tenant exists from here on. Usually Allocate
// made it and this only re-applies it; a tenant whose creation waited on a holder whose
// container had not started (an init container) is made now, after that container ran,
// its tenant deleted if it has no process left. A refusal fails this start of the
// container (the kubelet retries it), never the pod's admission.
grpc::Status DevicePluginService::PreStartContainer(
    grpc::ServerContext*, const v1beta1::PreStartContainerRequest* request,
    v1beta1::PreStartContainerResponse*) {
  const std::vector<std::string> ids(request->devices_ids().begin(), request->devices_ids().end());
  if (ids.empty()) return grpc::Status::OK;  // no slices: nothing to prepare
  auto plan = plan_allocation(ids, inventory_, class_);
  if (!plan) {
    spdlog::warn("PreStartContainer {} refused [{}]: {}", class_.resource_name,
                 joined(request->devices_ids()), plan.error());
    return {grpc::StatusCode::INVALID_ARGUMENT, "fracgpu: " + plan.error()};
  }
  pending_.started(plan->tenant);
  auto ensured = ensure(*plan);
  if (ensured && ensured->deferred) {
    ensured = Result<EnsuredTenant>::failure(
        "tenant " + plan->tenant + " cannot be made yet: another container not started yet " +
        "holds its slices");
  }
  if (!ensured) {
    spdlog::error("PreStartContainer failed for tenant {}: {}", plan->tenant, ensured.error());
    return failed(ensured.error());
  }
  // The spec again, right before the runtime resolves the name: one removed since the
  // Allocate (a sync that listed the broker before the tenant was made) is back.
  if (cdi_ != nullptr) {
    if (auto published =
            publish_cdi_device(*cdi_, config_.cdi_mode, *plan, ensured->dir, config_, nullptr);
        !published) {
      spdlog::error("PreStartContainer failed for tenant {}: {}", plan->tenant, published.error());
      return {grpc::StatusCode::FAILED_PRECONDITION, "fracgpu: " + published.error()};
    }
  }
  spdlog::info("PreStartContainer {}: tenant {} ready at {}", class_.resource_name, plan->tenant,
               ensured->dir);
  return grpc::Status::OK;
}

Result<EnsuredTenant> DevicePluginService::ensure(const AllocationPlan& plan) const {
  return ensure_tenant(
      broker_, plan, [this](const std::string& name) { return pending_.awaiting(name); },
      config_.broker_run_dir);
}

grpc::Status DevicePluginService::failed(const std::string& error) {
  const bool unreachable = error.find("cannot be reached") != std::string::npos;
  return {unreachable ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::FAILED_PRECONDITION,
          "fracgpu: " + error};
}

}  // namespace fracgpu::k8s
