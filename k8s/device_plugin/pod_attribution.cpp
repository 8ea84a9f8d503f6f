// Matching the kubelet's PodResources list to the plugin's tenants (see pod_attribution.h).
#include "device_plugin/pod_attribution.h"

#include "device_plugin/allocation_builder.h"

namespace fracgpu::k8s {
namespace {

const ResourceClass* class_of(const std::vector<ResourceClass>& classes,
                              const std::string& resource_name) {
  for (const auto& cls : classes) {
    if (cls.resource_name == resource_name) return &cls;
  }
  return nullptr;
}

// The device IDs of each of our resources that one container holds (the kubelet may
// list a resource in more than one entry; they are one allocation).
std::map<const ResourceClass*, std::vector<std::string>> ids_by_class(
    const v1::ContainerResources& container, const std::vector<ResourceClass>& classes) {
  std::map<const ResourceClass*, std::vector<std::string>> out;
  for (const auto& devices : container.devices()) {
    const ResourceClass* cls = class_of(classes, devices.resource_name());
    if (cls == nullptr) continue;
    auto& ids = out[cls];
    ids.insert(ids.end(), devices.device_ids().begin(), devices.device_ids().end());
  }
  return out;
}

}  // namespace

PodAttribution attribute_tenants(const v1::ListPodResourcesResponse& list,
                                 const std::vector<ResourceClass>& classes) {
  PodAttribution out;
  for (const auto& pod : list.pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& [cls, ids] : ids_by_class(container, classes)) {
        if (ids.empty()) continue;
        const PodIdentity who{pod.namespace_(), pod.name(), container.name()};
        auto held = container_slices(ids, *cls);
        if (!held) {
          out.skipped.push_back(describe(who) + ": " + held.error());
          continue;
        }
        out.tenants[held->tenant] = who;
      }
    }
  }
  return out;
}

std::vector<std::pair<std::string, PodIdentity>> identity_changes(
    const std::map<std::string, PodIdentity>& wanted, const nlohmann::json& broker_tenants) {
  std::vector<std::pair<std::string, PodIdentity>> changes;
  if (!broker_tenants.is_array()) return changes;
  for (const auto& tenant : broker_tenants) {
    if (!tenant.is_object() || !tenant.contains("name") || !tenant["name"].is_string()) continue;
    auto it = wanted.find(tenant["name"].get<std::string>());
    if (it == wanted.end() || it->second == pod_of(tenant)) continue;
    changes.emplace_back(it->first, it->second);
  }
  return changes;
}

}  // namespace fracgpu::k8s
