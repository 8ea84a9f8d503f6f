// How much of what a re-registering process says it holds the broker re-charges into its
// slot (tenant_segment.h, "A ledger lost"; docs/design.md "The memory ledger"). The
// process is the only one that knows its holdings once its slot was wiped, but it is a
// tenant process, on the wrong side of the trust boundary (docs/design.md "Threat model"):
// claiming less would free room for itself, claiming more would take room from others. So
// the claim is bounded:
//   * where the device's per-process usage is known (NVML, through the same GpuUsagePort
//     the usage audit reads, nvml_port.h): the charge is the claim kept within
//     [device - slack, device + slack], slack = one context's footprint + the audit's
//     tolerance (max(64 MiB, 2 % of the limit): driver memory the shim does not charge,
//     usage_audit.h), and never above the GPU's memory;
//   * without it: the claim, cut so that the tenant's books do not go above its cap
//     (others' slots counted) nor above the GPU's memory;
//   * either way never below what the slot books already (a claim never lowers books).
// Bytes on host (swapped) have no device figure: they are cut to what the cap leaves after
// the resident charge and to what the broker's record lets the tenant have on host there
// (DeviceQuota.host_allowance, swap_books.h) less what its other processes book on host, in
// whole swap pages: a claim of bytes on host that the broker never let it move books nothing. Pure
// functions; the socket server calls them once per device of a re-registration (no hot path).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/nvml_port.h"

namespace fracgpu::broker {

// What the process claims on one of its tenant's devices.
struct RechargeClaim {
  uint64_t used = 0;     // resident bytes
  uint64_t swapped = 0;  // bytes on host (minor 3)
};

// What the broker knows about that device when it decides.
struct RechargeFacts {
  uint64_t booked_used = 0;     // what the process's slot books now
  uint64_t booked_swapped = 0;  // its swapped pages, in bytes
  uint64_t others = 0;          // what the tenant's other processes book there (no placeholder)
  uint64_t host_allowance = 0;  // DeviceQuota.host_allowance: the most it may have on host
  uint64_t others_swapped = 0;  // what its other processes book on host there
  uint64_t limit = 0;           // the tenant's cap on this GPU
  uint64_t device_memory = 0;   // the GPU's memory
  uint64_t footprint = 0;       // bytes charged per context on this GPU
  std::optional<uint64_t> device_shows;  // NVML: what this pid holds on this GPU
};

enum class RechargeBasis {
  kClaimed,  // the claim as sent
  kDevice,   // raised or lowered to what the device shows for the process
  kCap,      // cut to the tenant's cap or the GPU's memory
  kBooked,   // what the slot booked already (the claim was lower)
};
const char* recharge_basis_name(RechargeBasis basis);

struct RechargeDecision {
  uint64_t used = 0;
  uint64_t swapped = 0;
  RechargeBasis basis = RechargeBasis::kClaimed;
};

// The audit's tolerance for driver memory the shim cannot see (usage_audit.h).
uint64_t recharge_tolerance(uint64_t limit);

RechargeDecision decide_recharge(const RechargeClaim& claim, const RechargeFacts& facts);

// What `pid` holds on the GPU `uuid` in `samples` (one GpuUsagePort::sample()); nullopt
// when that GPU was not read or the figure is unknown. A pid absent from a GPU that was
// read holds nothing there (0).
std::optional<uint64_t> device_usage_of(const std::vector<GpuUsageSample>& samples, pid_t pid,
                                        const std::string& uuid);

}  // namespace fracgpu::broker
