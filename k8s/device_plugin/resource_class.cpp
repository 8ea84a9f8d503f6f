// The plugin's slice classes and what each gives a container (rules in resource_class.h).
#include "device_plugin/resource_class.h"

#include <algorithm>

#include "device_plugin/slice_ids.h"

namespace fracgpu::k8s {
namespace {

constexpr const char* kSockSuffix = ".sock";

}  // namespace

std::string class_endpoint(const std::string& base, SliceClass kind) {
  if (kind == SliceClass::normal) return base;
  const std::string tag = kind == SliceClass::high ? "-high" : "-besteffort";
  const std::string suffix = kSockSuffix;
  const bool has_suffix = base.size() > suffix.size() &&
                          base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (!has_suffix) return base + tag;
  return base.substr(0, base.size() - suffix.size()) + tag + suffix;
}

std::vector<ResourceClass> resource_classes(const PluginConfig& config) {
  const int n = config.slices;
  const int high = config.high_slices;
  std::vector<ResourceClass> out;
  auto add = [&](SliceClass kind, const char* resource, const char* prefix, const char* priority,
                 const char* label, int first, int count, bool guaranteed) {
    if (count <= 0) return;  // nothing to advertise: not registered at all
    ResourceClass cls;
    cls.kind = kind;
    cls.resource_name = resource;
    cls.endpoint_name = class_endpoint(config.endpoint_name, kind);
    cls.tenant_prefix = prefix;
    cls.priority = priority;
    cls.label = label;
    cls.first_index = first;
    cls.count = count;
    cls.slices_per_gpu = n;
    cls.guaranteed = guaranteed;
    out.push_back(std::move(cls));
  };
  add(SliceClass::normal, kResourceName, kTenantPrefix, "normal", "normal", 0, n - high, true);
  add(SliceClass::high, kHighResourceName, kHighTenantPrefix, "high", "high", n - high, high, true);
  add(SliceClass::besteffort, kBestEffortResourceName, kBestEffortTenantPrefix, "low", "besteffort",
      n, config.besteffort_slices, false);
  return out;
}

SliceQuota quota_for(const ResourceClass& cls, uint64_t capacity, int k) {
  SliceQuota quota;
  const auto slices = static_cast<uint64_t>(std::max(0, k));
  const auto n = static_cast<uint64_t>(std::max(1, cls.slices_per_gpu));
  // capacity·k fits easily in 64 bits (k ≤ 64, capacity well under 2^57). Best-effort
  // slices can outnumber N, and the broker refuses a limit above the capacity.
  quota.memory_limit = std::min(capacity, capacity * slices / n);
  quota.memory_request = cls.guaranteed ? quota.memory_limit : 0;
  quota.compute = static_cast<int>(std::clamp<uint64_t>(100 * slices / n, 1, 100));
  return quota;
}

}  // namespace fracgpu::k8s
