// A tenant's two shared-memory files (quota and ledger, see tenant_segment.h), created
// or re-opened in the tenant's run directory and mapped read-write by the broker with
// Boost.Interprocess. Re-opening never disturbs a valid ledger: after a broker restart
// the tenant's processes still have it mapped and keep counting in it.
#pragma once

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <filesystem>
#include <memory>
#include <string_view>

#include "common/result.h"
#include "core/gpu_inventory.h"
#include "core/tenant_spec.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

class TenantSegments {
 public:
  // Creates or re-opens <dir>/quota (mode 0644) and <dir>/ledger (mode 0666).
  static Result<std::unique_ptr<TenantSegments>> open(const std::filesystem::path& dir);

  TenantQuota& quota() { return *quota_; }
  TenantLedger& ledger() { return *ledger_; }
  const TenantQuota& quota() const { return *quota_; }
  const TenantLedger& ledger() const { return *ledger_; }
  bool ledger_reused() const { return ledger_reused_; }  // a valid ledger file was found

  // Writes the spec into the quota in place and bumps its generation. Grants of GPUs
  // already present are kept (clamped into [request, limit], lowered race-safely);
  // a new GPU starts with grant = request.
  void publish(const TenantSpec& spec, const GpuInventory& gpus);

 private:
  TenantSegments() = default;
  boost::interprocess::file_mapping quota_file_, ledger_file_;
  boost::interprocess::mapped_region quota_region_, ledger_region_;
  TenantQuota* quota_ = nullptr;
  TenantLedger* ledger_ = nullptr;
  bool ledger_reused_ = false;
};

}  // namespace fracgpu::broker
