// From slice IDs to a broker tenant and a container response (see allocation_builder.h).
#include "device_plugin/allocation_builder.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "device_plugin/slice_ids.h"
#include "fracgpu/paths.h"

namespace fracgpu::k8s {

Result<ContainerSlices> container_slices(const std::vector<std::string>& device_ids,
                                         const ResourceClass& cls) {
  using R = Result<ContainerSlices>;
  if (device_ids.empty()) return R::failure("the request names no fracgpu slices");
  std::string uuid;
  std::string first_id;
  std::set<int> indices;
  for (const auto& id : device_ids) {
    auto slice = parse_slice_id(id);
    if (!slice)
      return R::failure("\"" + id + "\" is not a fracgpu slice ID (expected <gpu-uuid>::<k>)");
    if (uuid.empty()) {
      uuid = slice->gpu_uuid;
      first_id = id;
    } else if (slice->gpu_uuid != uuid) {
      return R::failure(
          "slices " + first_id + " and " + id +
          " are on different GPUs; fracgpu gives a container slices of one GPU only, so request at "
          "most " +
          std::to_string(cls.count) + " " + cls.resource_name +
          " per container (or split the work into several containers)");
    }
    if (!cls.owns(slice->index)) {
      return R::failure("slice " + id + " is not a " + cls.resource_name +
                        " slice: on this node that resource is " + std::to_string(cls.count) +
                        " slices of each GPU, numbered " + std::to_string(cls.first_index) +
                        " to " + std::to_string(cls.first_index + cls.count - 1));
    }
    indices.insert(slice->index);
  }
  ContainerSlices out;
  out.gpu_uuid = uuid;
  out.slices.assign(indices.begin(), indices.end());
  out.tenant = tenant_name_for(uuid, out.slices, cls.tenant_prefix);
  return out;
}

Result<AllocationPlan> plan_allocation(const std::vector<std::string>& device_ids,
                                       const SliceInventory& inventory, const ResourceClass& cls) {
  using R = Result<AllocationPlan>;
  auto held = container_slices(device_ids, cls);
  if (!held) return R::failure(held.error());
  const std::string& uuid = held->gpu_uuid;
  auto gpu = inventory.gpu(uuid);
  if (!gpu)
    return R::failure("GPU " + uuid +
                      " is not one of this node's GPUs known to the fracgpu broker");
  if (!gpu->healthy)
    return R::failure("GPU " + uuid + " is unhealthy: the fracgpu broker no longer lists it");

  AllocationPlan plan;
  plan.gpu = gpu->info;
  plan.slices = std::move(held->slices);
  plan.slices_per_gpu = cls.slices_per_gpu;
  plan.tenant = std::move(held->tenant);
  const SliceQuota quota =
      quota_for(cls, plan.gpu.memory_capacity, static_cast<int>(plan.slices.size()));
  plan.memory_limit = quota.memory_limit;
  plan.memory_request = quota.memory_request;
  plan.compute = quota.compute;
  plan.priority = cls.priority;
  plan.class_label = cls.label;
  return plan;
}

nlohmann::json tenant_definition(const AllocationPlan& plan) {
  return {{"name", plan.tenant},
          {"devices", nlohmann::json::array({{{"gpu", plan.gpu.index},
                                              {"memory_limit", plan.memory_limit},
                                              {"memory_request", plan.memory_request},
                                              {"compute", plan.compute},
                                              {"priority", plan.priority}}})}};
}

namespace {

// The plugin's tenants other than `plan`'s that hold any of its slices and have no live
// process: containers that have gone (the kubelet hands a slice to one container at a time).
std::vector<std::string> stale_holders(const nlohmann::json& tenants, const AllocationPlan& plan) {
  uint64_t mask = 0;
  for (int i : plan.slices) mask |= uint64_t{1} << i;
  const std::string tag = gpu_tag(plan.gpu.uuid);
  std::vector<std::string> stale;
  if (!tenants.is_array()) return stale;
  for (const auto& t : tenants) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) continue;
    const std::string name = t["name"].get<std::string>();
    auto held = parse_tenant_name(name);
    if (name == plan.tenant || !held || held->gpu_tag != tag || (held->mask & mask) == 0) continue;
    const bool has_processes =
        t.contains("processes") && t["processes"].is_array() && !t["processes"].empty();
    if (has_processes) {
      spdlog::warn(
          "tenant {} holds slices now given to {} but still has running processes: left alone",
          name, plan.tenant);
      continue;
    }
    stale.push_back(name);
  }
  return stale;
}

}  // namespace

Result<std::string> tenant_dir_from_reply(const nlohmann::json& reply, const std::string& tenant) {
  using R = Result<std::string>;
  const nlohmann::json* status = reply.is_object() ? &reply : nullptr;
  if (status != nullptr && status->contains("tenant")) status = &(*status)["tenant"];
  if (status == nullptr || !status->is_object() || !status->contains("run_dir") ||
      !(*status)["run_dir"].is_string()) {
    return R::failure("the fracgpu broker's reply for tenant " + tenant +
                      " does not say where its directory is");
  }
  const std::filesystem::path dir((*status)["run_dir"].get<std::string>());
  bool clean = dir.is_absolute();
  for (const auto& part : dir.relative_path()) clean = clean && part != "." && part != "..";
  if (!clean || dir.filename() != tenant) {
    return R::failure("the fracgpu broker reported \"" + dir.string() +
                      "\" as the directory of tenant " + tenant +
                      ", which is not an absolute path ending in the tenant's name");
  }
  return dir.string();
}

Result<EnsuredTenant> ensure_tenant(const BrokerAdmin& broker, const AllocationPlan& plan,
                                    const std::function<bool(const std::string&)>& awaiting_start,
                                    const std::string& broker_run_dir) {
  using R = Result<EnsuredTenant>;
  auto listed = broker.call({{"op", "list"}});
  if (!listed) return R::failure(listed.error());
  const nlohmann::json& tenants = (*listed)["tenants"];
  bool exists = false;
  if (tenants.is_array()) {
    for (const auto& t : tenants)
      exists = exists || (t.is_object() && t.value("name", "") == plan.tenant);
  }
  const nlohmann::json tenant = tenant_definition(plan);
  auto ready = [&](const Result<nlohmann::json>& reply) -> R {
    auto dir = tenant_dir_from_reply(*reply, plan.tenant);
    if (!dir) return R::failure(dir.error());
    return EnsuredTenant{*dir, false};
  };
  if (!exists) {
    auto created = broker.call({{"op", "create"}, {"tenant", tenant}});
    if (created) return ready(created);
    // Refused: most likely the GPU's guarantees are taken by tenants of containers that
    // have gone. Those are removed only now, so that a pod whose init container and app
    // container hold overlapping slices keeps both tenants while they fit; a holder whose
    // container has not started yet is never removed (pending_starts.h).
    std::vector<std::string> waiting_for;
    std::size_t deleted_any = 0;
    for (const auto& name : stale_holders(tenants, plan)) {
      if (awaiting_start && awaiting_start(name)) {
        waiting_for.push_back(name);
        continue;
      }
      spdlog::info("deleting tenant {}: it holds slices now given to {} (its container has gone)",
                   name, plan.tenant);
      auto deleted = broker.call({{"op", "delete"}, {"name", name}});
      if (!deleted) spdlog::warn("could not delete the stale tenant {}: {}", name, deleted.error());
      deleted_any += deleted ? 1 : 0;
    }
    if (deleted_any > 0) {
      created = broker.call({{"op", "create"}, {"tenant", tenant}});
      if (created) return ready(created);
    }
    // Another Allocate may have created it meanwhile; otherwise the refusal stands, unless
    // it waits on a container that has not started.
    auto names = broker.tenant_names();
    if (!names || std::find(names->begin(), names->end(), plan.tenant) == names->end()) {
      if (!waiting_for.empty()) {
        spdlog::info(
            "tenant {} waits for its container's start: {} still hold its slices for "
            "a container not started yet (an init container)",
            plan.tenant, waiting_for.front());
        return EnsuredTenant{
            (std::filesystem::path(broker_run_dir) / paths::kPodsDirName / plan.tenant).string(),
            true};
      }
      return R::failure("the fracgpu broker refused tenant " + plan.tenant + ": " +
                        created.error());
    }
  }
  auto updated = broker.call({{"op", "update"}, {"tenant", tenant}});
  if (!updated) {
    return R::failure("the fracgpu broker refused to update tenant " + plan.tenant + ": " +
                      updated.error());
  }
  return ready(updated);
}

std::string host_files_problem(const PluginConfig& config) {
  for (const std::string* path : {&config.shim_host_path, &config.preload_host_path}) {
    std::error_code ec;
    const auto st = std::filesystem::status(*path, ec);  // follows links, as the runtime does
    if (st.type() == std::filesystem::file_type::regular) continue;
    const std::string what = ec ? ec.message()
                             : st.type() == std::filesystem::file_type::directory
                                 ? "is a directory"
                                 : "is not a regular file";
    return *path + " on the node: " + what +
           " (the DaemonSet's install-shim init container writes it; is the path right, "
           "and is the plugin's /var/lib/fracgpu mounted?): refused, since the runtime would "
           "mount an empty directory in its place and the container would run uncapped";
  }
  return "";
}

cdi::ContainerEdits container_edits(const AllocationPlan& plan, const std::string& tenant_dir,
                                    const PluginConfig& config) {
  cdi::ContainerEdits edits;
  edits.mounts.push_back({config.shim_host_path, kContainerShimPath, true});
  edits.mounts.push_back({config.preload_host_path, kContainerPreloadPath, true});
  // Read-only: connect(2) to a socket needs no write access to the mount, the quota is
  // only read, and the ledger comes as a descriptor; a root process in the container
  // then gets EROFS for any write there.
  edits.mounts.push_back({tenant_dir, kContainerRunDir, true});
  edits.env.emplace_back("NVIDIA_VISIBLE_DEVICES", plan.gpu.uuid);
  edits.env.emplace_back("FRACGPU_SOCKET",
                         paths::kDefaultTenantSocket);  // kContainerRunDir/broker.sock
  return edits;
}

void fill_container_response(const AllocationPlan& plan, const std::string& tenant_dir,
                             const PluginConfig& config,
                             v1beta1::ContainerAllocateResponse& response) {
  if (config.cdi_mode != CdiMode::only) {
    const cdi::ContainerEdits edits = container_edits(plan, tenant_dir, config);
    for (const auto& m : edits.mounts) {
      auto* mount = response.add_mounts();
      mount->set_host_path(m.host_path);
      mount->set_container_path(m.container_path);
      mount->set_read_only(m.read_only);
    }
    auto& envs = *response.mutable_envs();
    for (const auto& [key, value] : edits.env) envs[key] = value;
  }

  auto& annotations = *response.mutable_annotations();
  annotations["fracgpu.io/tenant"] = plan.tenant;
  annotations["fracgpu.io/gpu"] = plan.gpu.uuid;
  annotations["fracgpu.io/slices"] =
      std::to_string(plan.slices.size()) + "/" + std::to_string(plan.slices_per_gpu);
  annotations["fracgpu.io/slice-class"] = plan.class_label;
}

}  // namespace fracgpu::k8s
