// TenantView: a read-only look at a tenant's quota and usage, for processes that report
// memory but never allocate it (nvidia-smi, monitoring libraries calling NVML). It maps
// the tenant's files without registering with the broker, so looking costs the broker
// nothing and leaves no process slot behind.
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
  // The view of the tenant whose socket is `socket_path` (files beside it), or null.
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
