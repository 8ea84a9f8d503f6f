// The bounds of a re-charge (see recharge_policy.h).
#include "core/recharge_policy.h"

#include <algorithm>

#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {
namespace {

constexpr uint64_t kToleranceFloor = 64ull << 20;  // usage_audit.h's default
constexpr uint64_t kTolerancePercent = 2;

uint64_t room_under(uint64_t ceiling, uint64_t taken) {
  return ceiling > taken ? ceiling - taken : 0;
}

}  // namespace

const char* recharge_basis_name(RechargeBasis basis) {
  switch (basis) {
    case RechargeBasis::kClaimed:
      return "claimed";
    case RechargeBasis::kDevice:
      return "device";
    case RechargeBasis::kCap:
      return "cap";
    case RechargeBasis::kBooked:
      return "booked";
  }
  return "claimed";
}

uint64_t recharge_tolerance(uint64_t limit) {
  return std::max(kToleranceFloor, limit / 100 * kTolerancePercent);
}

RechargeDecision decide_recharge(const RechargeClaim& claim, const RechargeFacts& facts) {
  RechargeDecision out;
  out.used = claim.used;
  if (facts.device_shows) {
    // The driver's figure is the truth, up to what it sees that the shim does not charge.
    const uint64_t shows = *facts.device_shows;
    const uint64_t slack = facts.footprint + recharge_tolerance(facts.limit);
    const uint64_t low = shows > slack ? shows - slack : 0;
    const uint64_t high = std::min(facts.device_memory, shows + slack);
    if (out.used < low || out.used > high) {
      out.used = std::clamp(out.used, std::min(low, high), high);
      out.basis = RechargeBasis::kDevice;
    }
  } else {
    const uint64_t high = std::min(facts.device_memory, room_under(facts.limit, facts.others));
    if (out.used > high) {
      out.used = high;
      out.basis = RechargeBasis::kCap;
    }
  }
  if (out.used < facts.booked_used) {
    out.used = facts.booked_used;
    out.basis = RechargeBasis::kBooked;
  }
  // Host bytes: within what the cap leaves beside the resident ones and what the broker let
  // the tenant move there beside its other processes' (the claim alone is no evidence), in
  // whole pages.
  const uint64_t host_room = std::min(room_under(facts.limit, facts.others + out.used),
                                      room_under(facts.host_allowance, facts.others_swapped));
  out.swapped = std::min(claim.swapped, host_room) / kSwapPage * kSwapPage;
  out.swapped = std::max(out.swapped, facts.booked_swapped);
  return out;
}

std::optional<uint64_t> device_usage_of(const std::vector<GpuUsageSample>& samples, pid_t pid,
                                        const std::string& uuid) {
  for (const GpuUsageSample& sample : samples) {
    if (sample.uuid != uuid) continue;
    if (!sample.ok) return std::nullopt;
    uint64_t bytes = 0;
    for (const GpuProcessUsage& p : sample.processes) {
      if (p.pid != pid) continue;
      if (!p.bytes_known) return std::nullopt;
      bytes += p.bytes;
    }
    return bytes;
  }
  return std::nullopt;
}

}  // namespace fracgpu::broker
