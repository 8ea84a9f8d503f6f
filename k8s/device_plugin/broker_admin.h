// The device plugin's link to the node broker: admin requests over
// <broker-run-dir>/admin.sock (protocol.h), retried with backoff while the broker is
// unreachable (it may be restarting: it persists its tenants and comes back), but never
// retried when the broker answered and refused (that answer is final and is passed on
// to the kubelet as it is). One connection per request: requests are rare (an Allocate,
// a health poll) and a fresh connection needs no recovery after a broker restart.
// It also carries a tenant's Kubernetes container ("pod" in TENANT), which the plugin
// learns from the kubelet (pod_attribution.h) and tells the broker with set_pod.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace fracgpu::k8s {

using broker::Result;
using broker::Status;

struct BrokerGpu {
  int index = 0;
  std::string uuid;
  std::string name;
  uint64_t memory_total = 0;
  // What tenants may be given: memory_total minus the broker's --reserve.
  uint64_t memory_capacity = 0;
};

// The Kubernetes container a tenant belongs to: TENANT's "pod" object.
struct PodIdentity {
  std::string namespace_name;
  std::string pod;
  std::string container;
  bool empty() const { return pod.empty(); }
  bool operator==(const PodIdentity&) const = default;
};

// {"namespace", "pod", "container"}, or {} for an empty identity (which clears it).
nlohmann::json pod_json(const PodIdentity& pod);
// A TENANT_STATUS's "pod" (absent or malformed: empty).
PodIdentity pod_of(const nlohmann::json& tenant_status);
// "namespace/pod/container", for logs.
std::string describe(const PodIdentity& pod);

struct RetryPolicy {
  int attempts = 8;  // about 4.5 s in all: long enough for a broker restart
  std::chrono::milliseconds first_delay{100};
  std::chrono::milliseconds max_delay{1000};
};

class BrokerAdmin {
 public:
  explicit BrokerAdmin(std::string run_dir, RetryPolicy retry = {})
      : run_dir_(std::move(run_dir)), retry_(retry) {}

  // The reply when "ok" is true; the broker's sentence when it refused; a transport
  // error (after the retries) when it could not be reached.
  Result<nlohmann::json> call(const nlohmann::json& request) const;

  // The broker's GPUs ("gpus" op), parsed; malformed entries are skipped with a warning.
  Result<std::vector<BrokerGpu>> gpus() const;

  // Names of the broker's tenants ("list" op).
  Result<std::vector<std::string>> tenant_names() const;

  // Every tenant's TENANT_STATUS ("list" op).
  Result<nlohmann::json> tenants() const;

  // An "update" that sets only the tenant's "pod": the broker changes nothing else
  // (no admission, no quota change).
  Status set_pod(const std::string& tenant, const PodIdentity& pod) const;

  const std::string& run_dir() const { return run_dir_; }

 private:
  std::string run_dir_;
  RetryPolicy retry_;
};

}  // namespace fracgpu::k8s
