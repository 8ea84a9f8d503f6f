// A CDI (Container Device Interface) spec for one device, as fracgpu writes it: the
// container edits a runtime applies when a container asks for the device by its qualified
// name "<vendor>/<class>=<name>" (SPEC.md of cncf-tags/container-device-interface). The
// edits are a plain struct that the device plugin's allocation builder fills once
// (allocation_builder.h): the kubelet's Allocate response and the CDI spec are two
// renderings of the same edits, never two hand-kept copies.
// Version: the lowest cdiVersion that covers what is used. Mount "type" needs 0.4.0; names
// starting with a digit would need 0.5.0 and are refused here. Podman 4.3 (Debian 12)
// accepts 0.1.0 to 0.5.0; containerd >= 1.7 and CRI-O accept 0.3.0 and later.
// Cost: building the JSON of a few mounts and variables, once per Allocate; nothing on the
// shim's hot path.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace fracgpu::k8s::cdi {

using broker::Result;
using broker::Status;

inline constexpr const char* kCdiVersion = "0.4.0";

// What a runtime must do to a container for it to use the device.
struct ContainerEdits {
  struct Mount {
    std::string host_path;
    std::string container_path;
    bool read_only = true;
  };
  std::vector<std::pair<std::string, std::string>> env;  // name, value; in order
  std::vector<Mount> mounts;
  // No device nodes: the plugin's response has none (the GPU's nodes come from the NVIDIA
  // runtime, by NVIDIA_VISIBLE_DEVICES); add "deviceNodes" here when it gets some.
};

// Checks a kind "<vendor>/<class>" by the spec's rules: the vendor a DNS-subdomain-like
// name of alphanumerics, '-', '.' (each part starting and ending with an alphanumeric),
// the class alphanumerics, '-', '_' starting with a letter and ending with an alphanumeric.
Status validate_kind(const std::string& kind);
// Checks a device name: alphanumerics, '-', '_', '.', ':', starting with a letter (a leading
// digit would need cdiVersion 0.5.0) and ending with an alphanumeric.
Status validate_device_name(const std::string& name);
// Absolute paths, non-empty variable names without '=': what the runtimes' loaders check.
Status validate_edits(const ContainerEdits& edits);

// "<kind>=<name>", the name a container asks for (ContainerAllocateResponse.cdi_devices).
std::string qualified_name(const std::string& kind, const std::string& name);

// The whole spec of one device: {"cdiVersion", "kind", "devices": [{"name",
// "containerEdits": {"env": ["K=V"...], "mounts": [{"hostPath", "containerPath", "type":
// "bind", "options": [...]}]}}]}. Bind mounts carry "rbind", "nosuid",
// "nodev" and "ro" when read-only: what the kubelet's own read-only mounts become in
// containerd and CRI-O, so that the two renderings give the container the same mount.
Result<nlohmann::json> device_spec(const std::string& kind, const std::string& name,
                                   const ContainerEdits& edits);

// The spec file of one device in a CDI directory: "<vendor>-<class>_<name>.json", the form
// of the CDI library's transient spec names (GenerateTransientSpecName), so one file per
// device can be written and removed on its own.
std::string spec_file_name(const std::string& kind, const std::string& name);
// The device name in a file name made by spec_file_name for `kind`, or "" for any other.
std::string device_of_file(const std::string& kind, const std::string& file_name);

}  // namespace fracgpu::k8s::cdi
