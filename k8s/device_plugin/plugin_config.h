// The device plugin's settings: defaults, the per-node config file (JSON, or plain
// "key=value" lines) and the rules that make a setting valid. Flags given on the command
// line override the file; main.cpp applies them after load_config_file.
#pragma once

#include <chrono>
#include <string>

#include "common/result.h"
#include "fracgpu/paths.h"

namespace fracgpu::k8s {

using broker::Result;
using broker::Status;

inline constexpr const char* kResourceName = "fracgpu.io/gpu-slice";
inline constexpr const char* kHighResourceName = "fracgpu.io/gpu-slice-high";
inline constexpr const char* kBestEffortResourceName = "fracgpu.io/gpu-slice-besteffort";
inline constexpr const char* kApiVersion = "v1beta1";
inline constexpr const char* kKubeletSocketName = "kubelet.sock";
inline constexpr const char* kDefaultEndpointName = "fracgpu.sock";
inline constexpr const char* kDefaultPodResourcesSocket =
    "/var/lib/kubelet/pod-resources/kubelet.sock";     // the kubelet's PodResources API
inline constexpr int kMaxPodResourcesInterval = 3600;  // seconds
// Where Allocate puts things inside the container.
inline constexpr const char* kContainerShimPath = "/usr/local/fracgpu/lib/libfracgpu.so";
inline constexpr const char* kContainerPreloadPath = "/etc/ld.so.preload";
inline constexpr const char* kContainerRunDir = paths::kRunDir;  // the tenant's run directory
// CDI: fracgpu's spec files (k8s/cdi/) and the kind of the devices they name.
inline constexpr const char* kDefaultCdiDir = "/var/run/cdi";
inline constexpr const char* kCdiKind = "fracgpu.io/gpu-slice";

// What Allocate returns (docs/kubernetes.md, "CDI", says why `both` is the default):
//   off   the mounts and environment only; no CDI spec is written (the plugin before CDI);
//   both  those, and the tenant's CDI device name, its spec written in cdi_dir with the
//         same edits: a runtime that applies CDI replaces each mount and variable by the
//         spec's identical one (same container path, same name), one that ignores CDI
//         uses the response's;
//   only  the CDI device name alone: the container gets the shim and its tenant ONLY from
//         a runtime that applies CDI; on one that ignores it the container runs uncapped.
enum class CdiMode { off, both, only };
Result<CdiMode> parse_cdi_mode(const std::string& text);
const char* cdi_mode_name(CdiMode mode);

struct PluginConfig {
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string endpoint_name = kDefaultEndpointName;
  std::string broker_run_dir = paths::kRunDir;
  int slices = 8;
  // Of each GPU's `slices`, how many are advertised as fracgpu.io/gpu-slice-high (0: the
  // resource is not registered). See resource_class.h.
  int high_slices = 0;
  // Extra, unguaranteed slices per GPU beyond `slices`, advertised as
  // fracgpu.io/gpu-slice-besteffort (0: not registered).
  int besteffort_slices = 0;
  // Host paths the container runtime bind-mounts (the DaemonSet's installer puts them there).
  std::string shim_host_path = "/var/lib/fracgpu/lib/libfracgpu.so";
  std::string preload_host_path = "/var/lib/fracgpu/ld.so.preload";
  // How often the broker's GPU list is re-read (health) and the kubelet socket checked.
  std::chrono::milliseconds health_interval{5000};
  std::chrono::milliseconds kubelet_check_interval{1000};
  // The kubelet's PodResources API, read to learn which pod and container each tenant
  // belongs to (pod_attribution_loop.h): every pod_resources_interval seconds and shortly
  // after each Allocate; 0 turns it off.
  std::string pod_resources_socket = kDefaultPodResourcesSocket;
  int pod_resources_interval = 10;
  CdiMode cdi_mode = CdiMode::both;
  std::string cdi_dir = kDefaultCdiDir;  // where the specs go; the runtime must read it
  std::string log_level = "info";
};

// Reads `path` into `config`. JSON: {"slices": 8, "high-slices": 2, "nodes": {"node-a":
// {"slices": 4}}}; key=value: "slices=8" and "slices.node-a=4" lines ('#' starts a
// comment). The keys are slices, high-slices, besteffort-slices and
// pod-resources-interval (seconds); for each key the
// entry for `node_name`, when there is one, wins over the plain one. Unknown keys are
// reported as warnings, never fatal, so a newer ConfigMap does not break an older plugin.
Status load_config_file(const std::string& path, const std::string& node_name,
                        PluginConfig& config);

// One sentence naming the first invalid setting, or success.
Status validate(const PluginConfig& config);

}  // namespace fracgpu::k8s
