// Memory outside every tenant (issue 27, row 10): per GPU, what NVML shows held by processes
// that belong to no tenant (a host job without the shim; in Kubernetes, a pod that set
// NVIDIA_VISIBLE_DEVICES itself) and the driver's memory beyond what its processes hold.
// The tenants' books know nothing of it, yet it is memory no tenant can have: so it is
//  * shown: `fracgpu status` (the GPU's "outside", docs/status-api.md) and the metric
//    fracgpu_gpu_memory_outside_bytes (docs/monitoring.md);
//  * taken out of what the broker lends (MemoryArbiter::set_outside: the unguaranteed pool
//    shrinks by it, so the guarantee enforcer takes borrowed memory back for the guarantees
//    it would otherwise eat into) and out of what it newly guarantees (admit_beside_outside:
//    a request made or raised that does not fit beside it is refused, naming it);
//  * with --fracgpu-only (the node's GPUs are meant for fracgpu tenants only; the Kubernetes
//    DaemonSet sets it), reported as an "outside" violation: once per process and GPU while it
//    holds memory there (an episode), with a log line, the GPU's violations in the status
//    and fracgpu_gpu_outside_violations_total. Never acted on: a process in no tenant is not
//    the broker's to stop (usage_audit.h).
// Which processes are outside is the audit's attribution (UsageAudit::outside(): neither
// registered, nor attributed to a tenant by ancestry or cgroup, nor the broker or one of its
// children such as the MPS daemon). The driver's part is NVML's device used minus every
// listed process's bytes, where the device reports its used memory.
// Pure: fed once per audit pass (500 ms by default) from the NVML sample the audit took; a
// GPU not read keeps its last figures. Cost: a pass over the outside processes of the sample.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/gpu_inventory.h"
#include "core/nvml_port.h"
#include "core/tenant_spec.h"

namespace fracgpu::broker {

// The name of the violation kind (beside usage_audit.h's kinds, which are per tenant).
inline constexpr const char* kOutsideViolationKind = "outside";

struct OutsideGpu {
  bool known = false;                      // false until the audit read the GPU once
  std::vector<GpuProcessUsage> processes;  // in no tenant, largest first
  uint64_t process_bytes = 0;              // their sum
  uint64_t driver_bytes = 0;               // NVML's device used beyond what its processes hold
  uint64_t total() const { return process_bytes + driver_bytes; }
};

struct OutsideViolation {
  std::chrono::system_clock::time_point time;
  uint32_t gpu = 0;
  std::string gpu_uuid;
  int32_t pid = 0;
  uint64_t bytes = 0;
  std::string detail;
};

class OutsideBooks {
 public:
  static constexpr std::size_t kRecent = 8;

  explicit OutsideBooks(bool fracgpu_only = false) : fracgpu_only_(fracgpu_only) {}

  // One GPU's NVML sample: `outside` are its processes in no tenant, `listed_bytes` what all
  // the processes it lists hold, `device_used` NVML's used memory of the device (if known).
  // Returns the outside violations that start now (none without --fracgpu-only).
  std::vector<OutsideViolation> update(uint32_t gpu, const std::string& uuid,
                                       std::vector<GpuProcessUsage> outside, uint64_t listed_bytes,
                                       std::optional<uint64_t> device_used,
                                       std::chrono::system_clock::time_point now);

  bool fracgpu_only() const { return fracgpu_only_; }
  // 0 for a GPU never read.
  uint64_t bytes(uint32_t gpu) const;
  const OutsideGpu* gpu(uint32_t gpu) const;
  uint64_t violations(uint32_t gpu) const;
  // "2.0 GiB held outside every tenant (pid 4242 2.0 GiB)"; empty when nothing is.
  std::string describe(uint32_t gpu) const;
  // {"known", "bytes", "process_bytes", "driver_bytes", "processes": [{pid, bytes}],
  //  "violations": {"reported": bool, "total": n, "recent": [...]}}
  nlohmann::json gpu_json(uint32_t gpu) const;

 private:
  bool fracgpu_only_;
  std::map<uint32_t, OutsideGpu> gpus_;
  std::set<std::pair<uint32_t, int32_t>> episodes_;  // (gpu, pid) reported and still holding
  std::map<uint32_t, uint64_t> counts_;
  std::deque<OutsideViolation> recent_;
};

// Whether the memory requests of `spec` fit beside the memory outside every tenant: on each
// of its GPUs where it asks for more than `before` did (nullptr: a new tenant), the others'
// requests plus its own plus what is held outside must fit the GPU's capacity. A request
// that does not grow is never refused for it (a tenant admitted earlier keeps its
// guarantee; the outside usage is reported instead).
Status admit_beside_outside(const TenantSpec& spec, const TenantSpec* before,
                            const GpuInventory& gpus, uint64_t reserve,
                            std::span<const TenantSpec* const> others, const OutsideBooks& outside);

}  // namespace fracgpu::broker
