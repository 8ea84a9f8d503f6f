// Which Kubernetes container each of the plugin's tenants belongs to. Allocate is never
// told (the device-plugin API carries device IDs only), but the kubelet's PodResources
// API lists, per pod and container, the device IDs of each resource it holds; the
// slice IDs a container holds name its tenant exactly as they did in Allocate
// (container_slices), so matching needs no state and survives plugin restarts.
// Pure functions over the kubelet's list and the broker's tenant list, tested without
// gRPC; pod_attribution_loop.h runs them. Cost: linear in the pods listed, every few
// seconds, off every hot path.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "device_plugin/broker_admin.h"
#include "device_plugin/resource_class.h"
#include "podresources/podresources.pb.h"

namespace fracgpu::k8s {

struct PodAttribution {
  std::map<std::string, PodIdentity> tenants;  // tenant name -> its container
  // One sentence per list entry of ours that names no tenant (IDs Allocate would have
  // refused: another GPU, another class's range, not a slice ID), for debug logs.
  std::vector<std::string> skipped;
};

// The tenants of the containers in `list` that hold slices of `classes` (the resources
// this plugin advertises; other resources are ignored). A container holding slices of
// two classes has two tenants. Should a tenant name come up for two containers (an init
// container's slices reused by an app container of the same pod), the one listed last
// wins: the kubelet lists a pod's init containers before its app containers.
PodAttribution attribute_tenants(const v1::ListPodResourcesResponse& list,
                                 const std::vector<ResourceClass>& classes);

// The updates the broker needs: every tenant in `broker_tenants` (the "list" reply's
// TENANT_STATUS array) that `wanted` names with an identity other than the one the
// broker holds. Tenants the broker has but `wanted` lacks are left alone: a container
// that has gone from the kubelet's list keeps its last identity until its tenant is
// deleted. Tenants `wanted` names that the broker lacks (an Allocate still in flight)
// wait for the next pass.
std::vector<std::pair<std::string, PodIdentity>> identity_changes(
    const std::map<std::string, PodIdentity>& wanted, const nlohmann::json& broker_tenants);

}  // namespace fracgpu::k8s
