// The burst/reclaim policy of MemoryArbiter. Grants live in the tenants' quota files
// and are the only thing the arbiter changes: raising one is always safe for racing
// processes, lowering one goes through ledger::lower_grant, which never leaves a grant
// below memory that a process already holds.
#include "core/memory_arbiter.h"

#include <algorithm>

#include "core/ledger_ops.h"
#include "core/quantity_parser.h"

namespace fracgpu::broker {
namespace {

uint64_t headroom_above(uint64_t level, uint64_t limit) {
  return level >= limit ? 0 : std::min(kBurstHeadroom, limit - level);
}

}  // namespace

uint64_t MemoryArbiter::guaranteed_on(std::span<const ArbiterMember> all, uint32_t gpu) const {
  uint64_t sum = 0;
  for_each_device_on(all, gpu, [&](const ArbiterMember&, DeviceQuota& q, DeviceUsage&) {
    sum += q.memory_request.load();
  });
  return sum;
}

uint64_t MemoryArbiter::borrowed_on(std::span<const ArbiterMember> all, uint32_t gpu,
                                    const TenantQuota* skip) const {
  uint64_t sum = 0;
  for_each_device_on(all, gpu, [&](const ArbiterMember& m, DeviceQuota& q, DeviceUsage&) {
    const uint64_t grant = q.memory_grant.load(), request = q.memory_request.load();
    if (m.quota != skip && grant > request) sum += grant - request;
  });
  return sum;
}

// The largest grant `who` may hold on q's GPU right now: its request plus whatever part
// of the unguaranteed pool is not borrowed by others, never above its limit.
uint64_t MemoryArbiter::grantable(std::span<const ArbiterMember> all, const ArbiterMember& who,
                                  const DeviceQuota& q) const {
  const uint32_t gpu = q.host_index;
  const uint64_t cap = capacity(gpu), guaranteed = guaranteed_on(all, gpu);
  const uint64_t pool = cap > guaranteed ? cap - guaranteed : 0;
  const uint64_t others = borrowed_on(all, gpu, who.quota);
  const uint64_t free_pool = pool > others ? pool - others : 0;
  return std::min(q.memory_limit.load(), q.memory_request.load() + free_pool);
}

void MemoryArbiter::squeeze_others(std::span<const ArbiterMember> all, const ArbiterMember& who,
                                   uint32_t gpu) {
  for_each_device_on(all, gpu, [&](const ArbiterMember& m, DeviceQuota& q, DeviceUsage& u) {
    if (m.quota == who.quota) return;
    ledger::lower_grant(q, u, std::max(q.memory_request.load(), u.used.load()));
  });
}

Result<uint64_t> MemoryArbiter::burst(std::span<const ArbiterMember> all, const ArbiterMember& who,
                                      uint32_t device, uint64_t bytes) {
  if (device >= std::min<uint32_t>(who.quota->device_count, kMaxDevices) ||
      who.quota->devices[device].present != 1) {
    return Result<uint64_t>::failure("device " + std::to_string(device) +
                                     " is not one of the GPUs of tenant '" + who.name + "'");
  }
  DeviceQuota& q = who.quota->devices[device];
  const uint64_t limit = q.memory_limit.load(), used = who.ledger->devices[device].used.load();
  const std::string where = "tenant '" + who.name + "' on GPU " + std::to_string(q.host_index);
  if (bytes > limit || used > limit - bytes) {
    return Result<uint64_t>::failure("allocating " + format_size(bytes) + " would take " + where +
                                     " to " + format_size(used + bytes) +
                                     ", over its memory limit of " + format_size(limit));
  }
  const uint64_t need = used + bytes;
  const uint64_t want =
      std::min(limit, std::max(q.memory_grant.load(), need + headroom_above(need, limit)));
  if (want <= q.memory_grant.load()) return q.memory_grant.load();
  uint64_t most = grantable(all, who, q);
  if (most < want) {
    squeeze_others(all, who, q.host_index);  // take back other tenants' idle headroom first
    most = grantable(all, who, q);
  }
  const uint64_t grant = std::min(want, most);
  if (grant < need) {
    return Result<uint64_t>::failure(
        "cannot grant " + where + " " + format_size(need) + " (its guaranteed request is " +
        format_size(q.memory_request.load()) + "): the rest of the GPU's " +
        format_size(capacity(q.host_index)) +
        " is guaranteed to or borrowed by other tenants, so at most " + format_size(most) +
        " is available now" +
        (outside(q.host_index) > 0 ? " (" + format_size(outside(q.host_index)) +
                                         " more is held by processes outside every tenant)"
                                   : std::string()));
  }
  if (grant > q.memory_grant.load()) q.memory_grant.store(grant);
  return q.memory_grant.load();
}

void MemoryArbiter::reclaim(std::span<const ArbiterMember> all) {
  for (const auto& m : all) {
    const uint32_t n = std::min<uint32_t>(m.quota->device_count, kMaxDevices);
    for (uint32_t i = 0; i < n; ++i) {
      DeviceQuota& q = m.quota->devices[i];
      DeviceUsage& u = m.ledger->devices[i];
      const uint64_t request = q.memory_request.load(), grant = q.memory_grant.load();
      if (q.present != 1 || grant <= request) continue;
      const uint64_t used = u.used.load();
      const uint64_t target =
          std::max(request, std::min(grant, used + headroom_above(used, q.memory_limit.load())));
      ledger::lower_grant(q, u, target);
    }
  }
}

}  // namespace fracgpu::broker
