// Memory overcommit on each GPU. A GPU's capacity C (total minus the operator's
// reserve) is split into the tenants' guaranteed requests R (admission keeps R <= C)
// and the unguaranteed pool U = C - R. A tenant may always use up to its request
// (grant >= request at all times, so that needs no broker round trip); above it, it
// borrows from U through "burst" requests, and the sum of all borrowings
// (grant - request) never exceeds U. Borrowed memory that is no longer used is
// reclaimed once per second, and at once when another tenant's burst needs it.
// Memory held outside every tenant (outside_usage.h: processes in no tenant, driver memory)
// is no tenant's to have: it comes out of C (set_outside), so U shrinks by it and the
// guarantee enforcer, which reads capacity(), takes borrowed memory back where it now sits
// on what is guaranteed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

inline constexpr uint64_t kBurstHeadroom = 256ull
                                           << 20;  // extra grant so not every allocation asks

struct ArbiterMember {
  std::string name;
  TenantQuota* quota = nullptr;
  TenantLedger* ledger = nullptr;
};

// fn(member, quota, usage) for every tenant device on host GPU `gpu`.
template <class Fn>
void for_each_device_on(std::span<const ArbiterMember> all, uint32_t gpu, Fn&& fn) {
  for (const auto& m : all) {
    const uint32_t n = std::min<uint32_t>(m.quota->device_count, kMaxDevices);
    for (uint32_t i = 0; i < n; ++i) {
      DeviceQuota& q = m.quota->devices[i];
      if (q.present == 1 && q.host_index == gpu) fn(m, q, m.ledger->devices[i]);
    }
  }
}

class MemoryArbiter {
 public:
  MemoryArbiter() = default;
  // capacity[g] = bytes of GPU g available to tenants (total - reserve).
  explicit MemoryArbiter(std::vector<uint64_t> capacity) : capacity_(std::move(capacity)) {}

  // What tenants can have of GPU `gpu`: total - reserve - what is held outside every tenant.
  uint64_t capacity(uint32_t gpu) const {
    const uint64_t cap = gpu < capacity_.size() ? capacity_[gpu] : 0;
    const uint64_t out = outside(gpu);
    return cap > out ? cap - out : 0;
  }
  uint64_t outside(uint32_t gpu) const { return gpu < outside_.size() ? outside_[gpu] : 0; }
  // The latest figure of memory outside every tenant on `gpu`; true when it grew (the pool
  // shrank: the enforcer's next tick is due).
  bool set_outside(uint32_t gpu, uint64_t bytes) {
    if (gpu >= outside_.size()) outside_.resize(gpu + 1, 0);
    const bool grew = bytes > outside_[gpu];
    outside_[gpu] = bytes;
    return grew;
  }

  // Raises `who`'s grant on its device `device` (index into its TenantQuota.devices) so
  // that used + bytes fits, plus headroom when available. Returns the new grant, or the
  // sentence explaining which limit or which other tenants' memory forbids it.
  Result<uint64_t> burst(std::span<const ArbiterMember> all, const ArbiterMember& who,
                         uint32_t device, uint64_t bytes);

  // Lowers every grant above its request to max(request, used + headroom).
  void reclaim(std::span<const ArbiterMember> all);

  // Sum of requests on host GPU `gpu`, and of grants above request, optionally skipping one tenant.
  uint64_t guaranteed_on(std::span<const ArbiterMember> all, uint32_t gpu) const;
  uint64_t borrowed_on(std::span<const ArbiterMember> all, uint32_t gpu,
                       const TenantQuota* skip) const;

 private:
  uint64_t grantable(std::span<const ArbiterMember> all, const ArbiterMember& who,
                     const DeviceQuota& q) const;
  void squeeze_others(std::span<const ArbiterMember> all, const ArbiterMember& who, uint32_t gpu);
  std::vector<uint64_t> capacity_;
  std::vector<uint64_t> outside_;  // by GPU: held outside every tenant (outside_usage.h)
};

}  // namespace fracgpu::broker
