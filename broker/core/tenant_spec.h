// What a tenant is, independent of where it lives: its validated name and, per GPU,
// the memory limit/request and the compute share/ceiling/priority. Conversions from
// and to the JSON of protocol.h (TENANT) live here too, with strict validation: every
// field is type- and range-checked and unknown fields are refused, because a typo such
// as "memory_limt" silently ignored would create a tenant without the intended cap.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

inline constexpr uint32_t kDefaultComputeWeight = 100;
inline constexpr uint32_t kMaxComputeWeight = 10000;  // DeviceQuota.compute_weight range

// DeviceSpec::memory_limit of a tenant created with "memory_limit":"available", until
// admission (admission.h) replaces it by the memory no other tenant is guaranteed.
inline constexpr uint64_t kMemoryLimitAvailable = 0;

struct DeviceSpec {
  uint32_t gpu = 0;             // host GPU index
  uint64_t memory_limit = 0;    // hard cap, bytes (> 0 once admitted; see kMemoryLimitAvailable)
  uint64_t memory_request = 0;  // guaranteed bytes, <= memory_limit
  uint32_t compute = kDefaultComputeWeight;  // weight 1..10000 (the CLI offers 1..100)
  uint32_t compute_limit = 0;                // ceiling in percent, 0 = none
  PriorityClass priority = PriorityClass::kNormal;
  std::string uuid;  // the GPU's UUID when the tenant was admitted (persisted)
  // "swap": "allow" lets the broker move this tenant's memory to host when it needs the
  // device memory back (docs/configuration.md "Swap"); the default "never" keeps every
  // allocation native.
  bool swap = false;
  bool operator==(const DeviceSpec&) const = default;
};

inline constexpr std::size_t kMaxOwners = 64;
inline constexpr uint64_t kMaxOwnerUid = 0xFFFFFFFEull;  // (uid_t)-1 means "no uid"

// The Kubernetes container a tenant belongs to, learnt by the device plugin from the
// kubelet's PodResources API and set with an admin "update". Empty outside Kubernetes
// (and until the plugin has matched the tenant's slices to a container).
struct PodIdentity {
  std::string namespace_name;
  std::string pod;
  std::string container;
  bool empty() const { return pod.empty(); }
  bool operator==(const PodIdentity&) const = default;
};

struct TenantSpec {
  std::string name;
  std::vector<DeviceSpec> devices;  // order = TenantQuota.devices order
  // The uids that may register in the tenant (root and the broker's uid always may).
  // Empty: a Kubernetes tenant, reachable only through its pod's mount (paths.h).
  std::vector<uint32_t> owners = {};
  PodIdentity pod = {};  // labels of its metrics in Kubernetes (namespace, pod, container)
  bool operator==(const TenantSpec&) const = default;
  const DeviceSpec* find_gpu(uint32_t gpu) const;
  bool has_owners() const { return !owners.empty(); }
  bool owned_by(uint32_t uid) const;
};

// Empty when the name is valid ([a-z0-9][a-z0-9._-]{0,62}), else the reason.
Status validate_tenant_name(std::string_view name);

const char* priority_name(PriorityClass p);
Result<PriorityClass> parse_priority(std::string_view text);

// TENANT JSON -> spec, for "create": name and devices[] (each with gpu and
// memory_limit) are required; memory_request defaults to memory_limit; "owners" is an
// optional array of at most kMaxOwners distinct uids (integers 0..kMaxOwnerUid). A memory_limit
// of "available" (protocol::kAvailableMemory) gives kMemoryLimitAvailable and a
// memory_request defaulting to 0. "pod" is an optional {"namespace","pod","container"}
// (DNS-1123 labels, the pod name a DNS-1123 subdomain; all three, or {} for none).
Result<TenantSpec> tenant_spec_from_json(const nlohmann::json& j);

// Applies a partial TENANT (for "update") to an existing spec: devices are matched by
// "gpu"; given fields replace old ones; a GPU not yet in the spec is appended (and then
// needs memory_limit). A memory_request not given keeps its old value, lowered to the
// new limit when that is smaller. "owners", when given, replaces the owners, but may not
// empty them nor give an owner-less tenant some (its directory would have to move).
// "pod", when given, replaces the pod identity ({} clears it).
Result<TenantSpec> apply_tenant_update(const TenantSpec& current, const nlohmann::json& j);

// spec -> TENANT JSON (also the persisted form; includes "owners" and "uuid" per device,
// and "pod" when the tenant has one).
nlohmann::json tenant_spec_to_json(const TenantSpec& spec);

}  // namespace fracgpu::broker
