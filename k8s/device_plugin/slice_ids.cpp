// Slice IDs and tenant names (see slice_ids.h for why names encode the slices).
#include "device_plugin/slice_ids.h"

#include <charconv>
#include <cstdio>

namespace fracgpu::k8s {
namespace {

// FNV-1a: tiny, stable across builds and machines (std::hash is neither).
uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

std::optional<uint64_t> parse_hex(const std::string& text) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string format_slice_id(const std::string& gpu_uuid, int index) {
  return gpu_uuid + kSliceSeparator + std::to_string(index);
}

std::optional<SliceId> parse_slice_id(const std::string& id) {
  const auto sep = id.rfind(kSliceSeparator);
  if (sep == std::string::npos || sep == 0) return std::nullopt;
  const std::string number = id.substr(sep + 2);
  if (number.empty() || number.size() > 2) return std::nullopt;
  int index = -1;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), index);
  if (ec != std::errc() || end != number.data() + number.size()) return std::nullopt;
  if (index < 0 || index >= kMaxSlicesPerGpu) return std::nullopt;
  return SliceId{id.substr(0, sep), index};
}

std::string gpu_tag(const std::string& gpu_uuid) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", static_cast<unsigned>(fnv1a(gpu_uuid) & 0xffffffffu));
  return buf;
}

std::string tenant_name_for(const std::string& gpu_uuid, const std::vector<int>& slice_indices,
                            const std::string& prefix) {
  uint64_t mask = 0;
  for (int i : slice_indices) {
    if (i >= 0 && i < kMaxSlicesPerGpu) mask |= uint64_t{1} << i;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(mask));
  return prefix + gpu_tag(gpu_uuid) + "-" + buf;
}

std::optional<TenantSlices> parse_tenant_name(const std::string& name) {
  std::string prefix;
  for (const char* known : {kTenantPrefix, kHighTenantPrefix, kBestEffortTenantPrefix}) {
    if (name.rfind(known, 0) == 0) prefix = known;
  }
  if (prefix.empty()) return std::nullopt;
  const std::string rest = name.substr(prefix.size());
  const auto dash = rest.find('-');
  if (dash != 8) return std::nullopt;
  auto tag = parse_hex(rest.substr(0, dash));
  auto mask = parse_hex(rest.substr(dash + 1));
  if (!tag || !mask || *mask == 0) return std::nullopt;
  return TenantSlices{prefix, rest.substr(0, dash), *mask};
}

}  // namespace fracgpu::k8s
