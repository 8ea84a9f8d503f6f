// Allocate's work for one container: from the slice IDs the kubelet chose to a broker
// tenant with the matching quota (k of N slices of GPU g ⇒ k/N of g's memory, as a
// guaranteed request, and 100·k/N percent compute share), and the response that makes
// the container use it (the shim's mounts, the tenant's run directory, the GPU). The
// tenant's directory is the one the broker reports, mounted READ-ONLY: the container
// connects to the socket and reads the quota there, and has nothing to write (its
// ledger comes as a descriptor over the socket), so even root in it cannot change its
// quota.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cdi/cdi_spec.h"
#include "device_plugin/broker_admin.h"
#include "device_plugin/plugin_config.h"
#include "device_plugin/resource_class.h"
#include "device_plugin/slice_inventory.h"
#include "deviceplugin/api.pb.h"

namespace fracgpu::k8s {

struct AllocationPlan {
  std::string tenant;
  BrokerGpu gpu;
  std::vector<int> slices;  // sorted, distinct
  int slices_per_gpu = 0;
  uint64_t memory_limit = 0;
  uint64_t memory_request = 0;
  int compute = 0;
  std::string priority;     // the broker's class: high, normal, low
  std::string class_label;  // normal, high, besteffort
};

// What a container's slice IDs of one class name: one GPU, the slice indices (sorted,
// distinct) and the tenant (tenant_name_for with the class's prefix). Checked for their
// form, one GPU and the class's index range only — not against the node's GPUs — so the
// same function names the tenant in Allocate and when the kubelet's PodResources list is
// matched to tenants (pod_attribution.h). Errors are one sentence for `kubectl describe`.
struct ContainerSlices {
  std::string gpu_uuid;
  std::vector<int> slices;
  std::string tenant;
};
Result<ContainerSlices> container_slices(const std::vector<std::string>& device_ids,
                                         const ResourceClass& cls);

// Checks the IDs (container_slices, and a known, healthy GPU) and computes the tenant and
// its quota (quota_for). Errors are one sentence meant for `kubectl describe pod`.
Result<AllocationPlan> plan_allocation(const std::vector<std::string>& device_ids,
                                       const SliceInventory& inventory, const ResourceClass& cls);

// The tenant's definition in the broker's admin protocol.
nlohmann::json tenant_definition(const AllocationPlan& plan);

// Creates the tenant, or updates it when it already exists (a restarted container), and
// returns the tenant's directory as the broker reports it (TENANT_STATUS "run_dir").
// When the broker refuses a new tenant, the plugin's tenants (of any class: a changed
// high-slices moves indices between classes) that still hold any of these slices, have no
// running process and are not `awaiting_start` are deleted and the creation is tried once
// more: the kubelet hands a slice to one container at a time, so such a tenant belongs to a
// container that has gone, and its guaranteed memory would block the new one. A holder
// awaiting its container's start (pending_starts.h: an init container allocated with this
// pod) is kept; then the result is `deferred`: the tenant is not made now, its directory is
// where the broker will make it (<broker run dir>/pods/<tenant>), and the caller makes it at
// the container's PreStartContainer.
struct EnsuredTenant {
  std::string dir;
  bool deferred = false;
};
Result<EnsuredTenant> ensure_tenant(const BrokerAdmin& broker, const AllocationPlan& plan,
                                    const std::function<bool(const std::string&)>& awaiting_start,
                                    const std::string& broker_run_dir);

// The tenant directory in a create/update reply, checked: an absolute path without "."
// or ".." components whose last component is the tenant's name.
Result<std::string> tenant_dir_from_reply(const nlohmann::json& reply, const std::string& tenant);

// Why the files the response mounts from the host (the shim, the preload file) cannot be
// handed out, or "" when both are regular files. A missing host path is not an error to the
// runtime: containerd's CRI creates it as an empty directory and mounts that, so the
// container would start with a directory at /etc/ld.so.preload and run without its cap
// (tests/runtime/cri_pod_test.sh showed it with containerd 1.6). Two stat(2) calls.
std::string host_files_problem(const PluginConfig& config);

// What the container needs, as one list of edits: the shim and the preload file, and the
// tenant's directory `tenant_dir`, read-only at kContainerRunDir; the GPU and the socket in
// the environment. The Allocate response's mounts and envs and the tenant's CDI spec are
// both made from this, so the two can never differ.
cdi::ContainerEdits container_edits(const AllocationPlan& plan, const std::string& tenant_dir,
                                    const PluginConfig& config);

// Fills the kubelet's response: container_edits() as mounts and environment (unless
// config.cdi_mode is `only`: then the CDI device carries them) and the annotations. The CDI
// device name is the caller's (cdi_publisher.h), since writing its spec may fail.
void fill_container_response(const AllocationPlan& plan, const std::string& tenant_dir,
                             const PluginConfig& config,
                             v1beta1::ContainerAllocateResponse& response);

}  // namespace fracgpu::k8s
