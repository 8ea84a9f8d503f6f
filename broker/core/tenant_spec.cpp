// Validation and JSON conversion of tenant definitions. Every accessor checks the JSON
// type before reading (nlohmann throws on type mismatch, and a throw out of a request
// handler is exactly what must never take the broker down), and reports the offending
// field by its path, e.g. "devices[1].memory_limit". The optional "pod" object follows
// the Kubernetes name rules (DNS-1123 labels and subdomains), so that what reaches a
// metric label or a log line is always a name the API server could have given.
#include "core/tenant_spec.h"

#include <algorithm>
#include <set>

#include "fracgpu/protocol.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;

const std::set<std::string, std::less<>> kTenantKeys{"name", "owners", "devices", "pod"};
const std::set<std::string, std::less<>> kPodKeys{"namespace", "pod", "container"};
constexpr std::size_t kMaxLabelLength = 63;       // DNS-1123 label: namespace, container
constexpr std::size_t kMaxSubdomainLength = 253;  // DNS-1123 subdomain: pod name
const std::set<std::string, std::less<>> kDeviceKeys{"gpu",     "memory_limit",  "memory_request",
                                                     "compute", "compute_limit", "priority",
                                                     "uuid",    "swap"};

Status check_keys(const json& obj, const std::set<std::string, std::less<>>& allowed,
                  const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    if (!allowed.contains(key))
      return Status::failure(where + " has an unknown field \"" + key + "\"");
  }
  return {};
}

// Reads an optional unsigned integer field; absent -> `fallback`.
Result<uint64_t> read_uint(const json& obj, const char* key, const std::string& where, uint64_t min,
                           uint64_t max, uint64_t fallback) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  const std::string path = where + "." + key;
  if (!it->is_number_integer()) return Result<uint64_t>::failure(path + " must be an integer");
  if (!it->is_number_unsigned() && it->get<int64_t>() < 0) {
    return Result<uint64_t>::failure(path + " must not be negative");
  }
  const uint64_t v =
      it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  if (v < min || v > max) {
    return Result<uint64_t>::failure(path + " must be between " + std::to_string(min) + " and " +
                                     std::to_string(max) + " (got " + std::to_string(v) + ")");
  }
  return v;
}

bool is_available_memory(const json& value) {
  return value.is_string() && value.get<std::string>() == protocol::kAvailableMemory;
}

Status apply_device_fields(const json& d, const std::string& where, DeviceSpec& dev) {
  if (auto s = check_keys(d, kDeviceKeys, where); !s) return s;
  if (auto it = d.find("memory_limit"); it != d.end() && is_available_memory(*it)) {
    return Status::failure(where + ".memory_limit \"" + protocol::kAvailableMemory +
                           "\" is only for creating a tenant; give a size in bytes");
  }
  auto limit = read_uint(d, "memory_limit", where, 1, UINT64_MAX, dev.memory_limit);
  if (!limit) return Status::failure(limit.error());
  const bool limit_given = d.contains("memory_limit");
  const uint64_t old_request = dev.memory_request;
  dev.memory_limit = *limit;
  auto request = read_uint(d, "memory_request", where, 0, UINT64_MAX,
                           limit_given && old_request > *limit ? *limit : old_request);
  if (!request) return Status::failure(request.error());
  dev.memory_request = *request;
  if (dev.memory_limit != kMemoryLimitAvailable && dev.memory_request > dev.memory_limit) {
    return Status::failure(where + ".memory_request (" + std::to_string(dev.memory_request) +
                           ") must not exceed memory_limit (" + std::to_string(dev.memory_limit) +
                           ")");
  }
  auto compute = read_uint(d, "compute", where, 1, kMaxComputeWeight, dev.compute);
  if (!compute) return Status::failure(compute.error());
  dev.compute = static_cast<uint32_t>(*compute);
  auto ceiling = read_uint(d, "compute_limit", where, 0, 100, dev.compute_limit);
  if (!ceiling) return Status::failure(ceiling.error());
  dev.compute_limit = static_cast<uint32_t>(*ceiling);
  if (auto it = d.find("priority"); it != d.end()) {
    if (!it->is_string())
      return Status::failure(where + ".priority must be \"high\", \"normal\" or \"low\"");
    auto p = parse_priority(it->get<std::string>());
    if (!p) return Status::failure(where + ".priority: " + p.error());
    dev.priority = *p;
  }
  if (auto it = d.find("swap"); it != d.end()) {
    if (!it->is_string() || (*it != "allow" && *it != "never"))
      return Status::failure(where + ".swap must be \"allow\" or \"never\"");
    dev.swap = *it == "allow";
  }
  if (auto it = d.find("uuid"); it != d.end()) {
    if (!it->is_string() || it->get<std::string>().size() >= kUuidSize) {
      return Status::failure(where + ".uuid must be a GPU UUID string");
    }
    dev.uuid = it->get<std::string>();
  }
  // A high tenant is never made to wait, so a ceiling could not be enforced on it.
  if (dev.priority == PriorityClass::kHigh && dev.compute_limit != 0) {
    return Status::failure(
        where +
        ": a compute ceiling (compute_limit) cannot be combined with priority \"high\" "
        "(high-priority work is never held back); use priority normal with a ceiling");
  }
  return {};
}

Result<uint32_t> read_gpu_index(const json& d, const std::string& where) {
  if (!d.is_object()) return Result<uint32_t>::failure(where + " must be an object");
  if (!d.contains("gpu")) return Result<uint32_t>::failure(where + " needs a \"gpu\" index");
  auto gpu = read_uint(d, "gpu", where, 0, kMaxDevices - 1, 0);
  if (!gpu) return Result<uint32_t>::failure(gpu.error());
  return static_cast<uint32_t>(*gpu);
}

// "owners": [uid, ...], distinct, at most kMaxOwners, each 0..kMaxOwnerUid.
Result<std::vector<uint32_t>> read_owners(const json& value) {
  using R = Result<std::vector<uint32_t>>;
  if (!value.is_array())
    return R::failure("tenant \"owners\" must be an array of numeric uids, e.g. [1000]");
  if (value.size() > kMaxOwners) {
    return R::failure("tenant \"owners\" lists " + std::to_string(value.size()) +
                      " uids; at most " + std::to_string(kMaxOwners) + " are allowed");
  }
  std::vector<uint32_t> owners;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& uid = value[i];
    const std::string where = "owners[" + std::to_string(i) + "]";
    if (!uid.is_number_integer()) return R::failure(where + " must be a numeric uid");
    if (!uid.is_number_unsigned() && uid.get<int64_t>() < 0)
      return R::failure(where + " must not be negative");
    const uint64_t v = uid.get<uint64_t>();
    if (v > kMaxOwnerUid) {
      return R::failure(where + " (" + std::to_string(v) + ") is not a uid (0 to " +
                        std::to_string(kMaxOwnerUid) + ")");
    }
    if (std::find(owners.begin(), owners.end(), v) != owners.end())
      return R::failure("uid " + std::to_string(v) + " is listed twice in \"owners\"");
    owners.push_back(static_cast<uint32_t>(v));
  }
  return owners;
}

// A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool is_dns_label(std::string_view text) {
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (text.empty() || text.size() > kMaxLabelLength) return false;
  if (!alnum(text.front()) || !alnum(text.back())) return false;
  return std::all_of(text.begin(), text.end(), [&](char c) { return alnum(c) || c == '-'; });
}

// A DNS-1123 subdomain: labels joined by '.', at most 253 characters in all.
bool is_dns_subdomain(std::string_view text) {
  if (text.empty() || text.size() > kMaxSubdomainLength) return false;
  for (std::size_t start = 0;;) {
    const std::size_t dot = text.find('.', start);
    if (!is_dns_label(text.substr(start, dot == std::string_view::npos ? dot : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

Result<std::string> read_pod_field(const json& pod, const char* key, bool subdomain) {
  using R = Result<std::string>;
  const std::string path = std::string("pod.") + key;
  const std::string rule =
      subdomain ? " must be a Kubernetes object name (DNS-1123 subdomain: at most 253 lowercase "
                  "letters, digits, '-' and '.', starting and ending with a letter or digit)"
                : " must be a Kubernetes name (DNS-1123 label: at most 63 lowercase letters, "
                  "digits and '-', starting and ending with a letter or digit)";
  auto it = pod.find(key);
  if (it == pod.end()) return R::failure(path + " is missing (give namespace, pod and container)");
  if (!it->is_string()) return R::failure(path + rule);
  const std::string value = it->get<std::string>();
  if (!(subdomain ? is_dns_subdomain(value) : is_dns_label(value))) {
    return R::failure(path + " \"" + value.substr(0, 80) + "\"" + rule);
  }
  return value;
}

// "pod": {"namespace", "pod", "container"}, all three, or {} for none.
Result<PodIdentity> read_pod(const json& value) {
  using R = Result<PodIdentity>;
  if (!value.is_object())
    return R::failure("tenant \"pod\" must be an object {\"namespace\", \"pod\", \"container\"}");
  if (auto s = check_keys(value, kPodKeys, "pod"); !s) return R::failure(s.error());
  if (value.empty()) return PodIdentity{};
  auto ns = read_pod_field(value, "namespace", false);
  if (!ns) return R::failure(ns.error());
  auto pod = read_pod_field(value, "pod", true);
  if (!pod) return R::failure(pod.error());
  auto container = read_pod_field(value, "container", false);
  if (!container) return R::failure(container.error());
  return PodIdentity{std::move(*ns), std::move(*pod), std::move(*container)};
}

Result<std::string> read_name(const json& j) {
  auto it = j.find("name");
  if (it == j.end() || !it->is_string())
    return Result<std::string>::failure("tenant \"name\" must be a string");
  const std::string name = it->get<std::string>();
  if (auto s = validate_tenant_name(name); !s) return Result<std::string>::failure(s.error());
  return name;
}

}  // namespace

const DeviceSpec* TenantSpec::find_gpu(uint32_t gpu) const {
  for (const auto& d : devices) {
    if (d.gpu == gpu) return &d;
  }
  return nullptr;
}

bool TenantSpec::owned_by(uint32_t uid) const {
  return std::find(owners.begin(), owners.end(), uid) != owners.end();
}

Status validate_tenant_name(std::string_view name) {
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  const std::string shown = "tenant name \"" + std::string(name.substr(0, 80)) + "\"";
  const std::string rule =
      " (use 1-63 characters: lowercase letters, digits, '.', '_' or '-', starting with a letter "
      "or digit)";
  if (name.empty() || name.size() > kTenantNameSize - 1)
    return Status::failure(shown + " has a bad length" + rule);
  if (!lower_alnum(name.front()))
    return Status::failure(shown + " must start with a lowercase letter or digit" + rule);
  for (char c : name) {
    if (!lower_alnum(c) && c != '.' && c != '_' && c != '-') {
      return Status::failure(shown + " contains a character that is not allowed" + rule);
    }
  }
  return {};
}

const char* priority_name(PriorityClass p) {
  switch (p) {
    case PriorityClass::kHigh:
      return "high";
    case PriorityClass::kLow:
      return "low";
    case PriorityClass::kNormal:
      break;
  }
  return "normal";
}

Result<PriorityClass> parse_priority(std::string_view text) {
  if (text == "high") return PriorityClass::kHigh;
  if (text == "normal") return PriorityClass::kNormal;
  if (text == "low") return PriorityClass::kLow;
  return Result<PriorityClass>::failure("priority \"" + std::string(text.substr(0, 40)) +
                                        "\" is not one of high, normal, low");
}

Result<TenantSpec> tenant_spec_from_json(const json& j) {
  if (!j.is_object()) return Result<TenantSpec>::failure("\"tenant\" must be an object");
  if (auto s = check_keys(j, kTenantKeys, "tenant"); !s)
    return Result<TenantSpec>::failure(s.error());
  auto name = read_name(j);
  if (!name) return Result<TenantSpec>::failure(name.error());
  auto devs = j.find("devices");
  if (devs == j.end() || !devs->is_array() || devs->empty() || devs->size() > kMaxDevices) {
    return Result<TenantSpec>::failure(
        "tenant \"devices\" must be an array of 1 to 16 GPU entries");
  }
  TenantSpec spec;
  spec.name = *name;
  if (auto it = j.find("owners"); it != j.end()) {
    auto owners = read_owners(*it);
    if (!owners) return Result<TenantSpec>::failure(owners.error());
    spec.owners = std::move(*owners);
  }
  if (auto it = j.find("pod"); it != j.end()) {
    auto pod = read_pod(*it);
    if (!pod) return Result<TenantSpec>::failure(pod.error());
    spec.pod = std::move(*pod);
  }
  for (std::size_t i = 0; i < devs->size(); ++i) {
    const std::string where = "devices[" + std::to_string(i) + "]";
    auto gpu = read_gpu_index((*devs)[i], where);
    if (!gpu) return Result<TenantSpec>::failure(gpu.error());
    if (spec.find_gpu(*gpu))
      return Result<TenantSpec>::failure("GPU " + std::to_string(*gpu) + " is listed twice");
    if (!(*devs)[i].contains("memory_limit"))
      return Result<TenantSpec>::failure(where + " needs \"memory_limit\"");
    DeviceSpec dev;
    dev.gpu = *gpu;
    json entry = (*devs)[i];
    if (is_available_memory(entry["memory_limit"])) {
      entry.erase("memory_limit");  // kMemoryLimitAvailable; admission fills it in
      dev.memory_limit = kMemoryLimitAvailable;
      dev.memory_request = 0;
    } else {
      auto limit = read_uint(entry, "memory_limit", where, 1, UINT64_MAX, 0);
      if (!limit) return Result<TenantSpec>::failure(limit.error());
      dev.memory_request = *limit;
    }
    if (auto s = apply_device_fields(entry, where, dev); !s)
      return Result<TenantSpec>::failure(s.error());
    spec.devices.push_back(dev);
  }
  return spec;
}

Result<TenantSpec> apply_tenant_update(const TenantSpec& current, const json& j) {
  if (!j.is_object()) return Result<TenantSpec>::failure("\"tenant\" must be an object");
  if (auto s = check_keys(j, kTenantKeys, "tenant"); !s)
    return Result<TenantSpec>::failure(s.error());
  TenantSpec spec = current;
  if (auto it = j.find("owners"); it != j.end()) {
    auto owners = read_owners(*it);
    if (!owners) return Result<TenantSpec>::failure(owners.error());
    if (owners->empty() != current.owners.empty()) {
      return Result<TenantSpec>::failure(
          current.owners.empty()
              ? "tenant '" + current.name +
                    "' has no owners (a Kubernetes-style tenant, reachable only through its "
                    "pod's mount) and cannot be given some; delete it and create it again with "
                    "owners"
              : "tenant '" + current.name +
                    "' cannot lose all its owners (that would make it a Kubernetes-style "
                    "tenant, kept in another directory); give at least one owner, or delete it "
                    "and create it again without owners");
    }
    spec.owners = std::move(*owners);
  }
  if (auto it = j.find("pod"); it != j.end()) {
    auto pod = read_pod(*it);
    if (!pod) return Result<TenantSpec>::failure(pod.error());
    spec.pod = std::move(*pod);
  }
  auto devs = j.find("devices");
  if (devs == j.end()) return spec;
  if (!devs->is_array() || devs->size() > kMaxDevices) {
    return Result<TenantSpec>::failure(
        "tenant \"devices\" must be an array of at most 16 GPU entries");
  }
  for (std::size_t i = 0; i < devs->size(); ++i) {
    const std::string where = "devices[" + std::to_string(i) + "]";
    auto gpu = read_gpu_index((*devs)[i], where);
    if (!gpu) return Result<TenantSpec>::failure(gpu.error());
    auto it = std::find_if(spec.devices.begin(), spec.devices.end(),
                           [&](const DeviceSpec& d) { return d.gpu == *gpu; });
    if (it == spec.devices.end()) {
      if (!(*devs)[i].contains("memory_limit")) {
        return Result<TenantSpec>::failure(where + " adds GPU " + std::to_string(*gpu) +
                                           " and so needs \"memory_limit\"");
      }
      if (spec.devices.size() >= kMaxDevices)
        return Result<TenantSpec>::failure("a tenant can use at most 16 GPUs");
      DeviceSpec dev;
      dev.gpu = *gpu;
      dev.memory_request = UINT64_MAX;  // a new GPU's request defaults to its limit
      spec.devices.push_back(dev);
      it = spec.devices.end() - 1;
    }
    if (auto s = apply_device_fields((*devs)[i], where, *it); !s)
      return Result<TenantSpec>::failure(s.error());
  }
  return spec;
}

nlohmann::json tenant_spec_to_json(const TenantSpec& spec) {
  json devices = json::array();
  for (const auto& d : spec.devices) {
    json dj = {{"gpu", d.gpu},
               {"memory_limit", d.memory_limit},
               {"memory_request", d.memory_request},
               {"compute", d.compute},
               {"compute_limit", d.compute_limit},
               {"priority", priority_name(d.priority)},
               {"swap", d.swap ? "allow" : "never"}};
    if (!d.uuid.empty()) dj["uuid"] = d.uuid;
    devices.push_back(std::move(dj));
  }
  json out = {{"name", spec.name}, {"devices", std::move(devices)}};
  out["owners"] = spec.owners;  // [] for a tenant without owners
  if (!spec.pod.empty()) {
    out["pod"] = {{"namespace", spec.pod.namespace_name},
                  {"pod", spec.pod.pod},
                  {"container", spec.pod.container}};
  }
  return out;
}

}  // namespace fracgpu::broker
