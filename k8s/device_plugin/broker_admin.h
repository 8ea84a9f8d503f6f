// The device plugin's link to the node broker: admin requests over
// <broker-run-dir>/admin.sock (protocol.h), retried with backoff while the broker is
// unreachable (it may be restarting: it persists its tenants and comes back), but never
// retried when the broker answered and refused (that answer is final and is passed on
// to the kubelet as it is). One connection per request: requests are rare (an Allocate,
// a health poll) and a fresh connection needs no recovery after a broker restart.
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

  const std::string& run_dir() const { return run_dir_; }

 private:
  std::string run_dir_;
  RetryPolicy retry_;
};

}  // namespace fracgpu::k8s
