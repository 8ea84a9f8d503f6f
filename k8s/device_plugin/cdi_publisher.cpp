// Writing, naming and removing the tenants' CDI specs (see cdi_publisher.h).
#include "device_plugin/cdi_publisher.h"

#include <spdlog/spdlog.h>

#include <set>

namespace fracgpu::k8s {

Result<std::optional<cdi::SpecDir>> open_cdi_dir(const PluginConfig& config) {
  using R = Result<std::optional<cdi::SpecDir>>;
  if (config.cdi_mode == CdiMode::off) return std::optional<cdi::SpecDir>();
  auto dir = cdi::SpecDir::open(config.cdi_dir, kCdiKind);
  if (!dir) return R::failure(dir.error() + " (--cdi-dir; or --cdi off)");
  return std::optional<cdi::SpecDir>(std::move(*dir));
}

Status publish_cdi_device(const cdi::SpecDir& dir, CdiMode mode, const AllocationPlan& plan,
                          const std::string& tenant_dir, const PluginConfig& config,
                          v1beta1::ContainerAllocateResponse* response) {
  auto written = dir.write(plan.tenant, container_edits(plan, tenant_dir, config));
  if (!written) {
    if (mode == CdiMode::only) return Status::failure(written.error());
    spdlog::error("{}: tenant {} is given by the response's mounts alone, without its CDI name",
                  written.error(), plan.tenant);
    return {};
  }
  if (response != nullptr) response->add_cdi_devices()->set_name(*written);
  return {};
}

Result<std::vector<std::string>> sync_cdi_specs(const cdi::SpecDir& dir,
                                                const BrokerAdmin& broker) {
  using R = Result<std::vector<std::string>>;
  // Taken before the listing: a spec written while the broker answers is newer, and kept.
  const int64_t listed_at = cdi::wall_clock_ns();
  auto names = broker.tenant_names();
  if (!names) return R::failure(names.error());
  const std::set<std::string> listed(names->begin(), names->end());
  auto removed = dir.reconcile(listed, listed_at);
  if (!removed) return R::failure(removed.error());
  for (const auto& tenant : *removed)
    spdlog::info("removed the CDI spec of tenant {}: the broker no longer has it", tenant);
  return removed;
}

}  // namespace fracgpu::k8s
