// The plugin's tenants whose containers are gone (see gone_tenants.h).
#include "device_plugin/gone_tenants.h"

#include <set>

#include "device_plugin/slice_ids.h"

namespace fracgpu::k8s {

std::vector<std::string> GoneTenants::pass(
    const std::map<std::string, PodIdentity>& listed, const nlohmann::json& broker_tenants,
    const std::function<bool(const std::string&)>& awaiting_start, Clock::time_point now) {
  std::vector<std::string> gone;
  std::set<std::string> candidates;
  if (broker_tenants.is_array()) {
    for (const auto& t : broker_tenants) {
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string()) continue;
      const std::string name = t["name"].get<std::string>();
      if (!parse_tenant_name(name)) continue;  // not one this plugin made
      const bool running =
          t.contains("processes") && (!t["processes"].is_array() || !t["processes"].empty());
      if (listed.contains(name) || running || (awaiting_start && awaiting_start(name))) continue;
      candidates.insert(name);
    }
  }
  // Whatever is no candidate now starts again from zero (listed again, running, deleted).
  std::erase_if(absent_, [&](const auto& e) { return !candidates.contains(e.first); });
  for (const std::string& name : candidates) {
    auto [it, fresh] = absent_.try_emplace(name, Absence{0, now});
    ++it->second.passes;
    if (it->second.passes >= passes_ && now - it->second.since >= span_) {
      gone.push_back(name);
      absent_.erase(it);
    }
  }
  return gone;
}

}  // namespace fracgpu::k8s
