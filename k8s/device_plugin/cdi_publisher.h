// The device plugin's CDI side: the tenant's spec written at Allocate and again at
// PreStartContainer (right before the runtime resolves the name, so a spec removed in
// between is back), its qualified name added to the container's response, and the specs of
// tenants the broker no longer has removed (sync_cdi_specs, on the health thread, every
// --health-interval-ms). What a failed write means depends on the mode (plugin_config.h):
// under `only` the CDI device is the container's only way to its tenant, so the Allocate
// fails; under `both` the response's own mounts still cap the container, so the name is
// left out and the failure logged. Cost: one small file write per Allocate and per
// container start; one broker "list" and one readdir per health interval.
#pragma once

#include <optional>

#include "cdi/spec_dir.h"
#include "device_plugin/allocation_builder.h"
#include "device_plugin/broker_admin.h"
#include "device_plugin/plugin_config.h"
#include "deviceplugin/api.pb.h"

namespace fracgpu::k8s {

// The plugin's CDI directory, or nullopt when config.cdi_mode is off. An error (one
// sentence, for the plugin's exit) when the directory cannot be made or written.
Result<std::optional<cdi::SpecDir>> open_cdi_dir(const PluginConfig& config);

// Writes the tenant's spec (container_edits) and, when written, adds its name to
// `response`. Fails only where the Allocate must fail (mode `only`).
Status publish_cdi_device(const cdi::SpecDir& dir, CdiMode mode, const AllocationPlan& plan,
                          const std::string& tenant_dir, const PluginConfig& config,
                          v1beta1::ContainerAllocateResponse* response);

// Removes the specs of tenants the broker does not list (spec_dir.h's rule: only those
// written before the listing began). Returns the tenants whose specs were removed; an error
// when the broker cannot be asked (nothing is removed then) or a file cannot be removed.
Result<std::vector<std::string>> sync_cdi_specs(const cdi::SpecDir& dir, const BrokerAdmin& broker);

}  // namespace fracgpu::k8s
