// TenantView: a read-only look at a tenant's quota and usage, for processes that report
// memory but never allocate it (nvidia-smi, monitoring libraries calling NVML). It maps
// the quota by path and asks the broker once ("view") for a read-only descriptor of the
// ledger, which has no path a tenant can reach; it never registers, so looking leaves
// no process slot behind, and the connection is closed right after.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fracgpu/tenant_segment.h"

namespace fracgpu {

struct DeviceMemoryView {
  uint64_t limit = 0;
  uint64_t used = 0;
};

class TenantView {
 public:
  // The view of the tenant whose socket is `socket_path` (the quota beside it), or null
  // when there is no such tenant or its broker does not answer within about a second.
  static TenantView* open(const std::string& socket_path);

  // Limit and tenant-wide usage of the GPU with this UUID ("GPU-…"), if the tenant has it.
  std::optional<DeviceMemoryView> device(const char* uuid) const;

 private:
  const TenantQuota* quota_ = nullptr;
  const TenantLedger* ledger_ = nullptr;
};

// The same lookup over already mapped segments (used by registered processes too).
std::optional<DeviceMemoryView> device_memory_view(const TenantQuota& quota,
                                                   const TenantLedger& ledger, const char* uuid);

}  // namespace fracgpu
