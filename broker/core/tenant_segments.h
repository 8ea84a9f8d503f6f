// A tenant's two shared-memory files (quota and ledger, see tenant_segment.h), created
// or re-opened and mapped read-write by the broker with Boost.Interprocess: the quota in
// the tenant's directory (opened read-only by path by its processes), the ledger in
// <run-dir>/ledgers/, which no tenant can reach by path (each registered process gets a
// descriptor, ledger_descriptor()). Re-opening never disturbs a valid ledger: after a
// broker restart the tenant's processes still have it mapped and keep counting in it,
// and a ledger of the old layout (<dir>/ledger) is moved by rename, so it stays the same
// file for the processes that map it. An existing ledger whose header is damaged is
// rebuilt from its processes' slots rather than zeroed (segment_recovery.h). Whenever the
// ledger had to be rebuilt or re-created, the quota's ledger_incarnation changes (and is
// woken), so that the processes that map the quota re-register and re-charge what they
// hold (tenant_segment.h, "A ledger lost"). No hot path: open at start or create, the
// header check once per maintenance second.
#pragma once

#include <sys/types.h>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <filesystem>
#include <memory>
#include <string_view>
#include <utility>

#include "common/result.h"
#include "core/gpu_inventory.h"
#include "core/tenant_spec.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu::broker {

class TenantSegments {
 public:
  // Creates or re-opens <dir>/quota (mode `quota_mode`: 0644 for a pod's tenant, read by
  // path; 0600 for a host tenant with owners, passed as a descriptor) and `ledger_path`
  // (mode 0600), both owned by the broker's uid; an existing file gets the mode again (a
  // restart tightens an older layout's 0644). A <dir>/ledger left by the old layout
  // becomes `ledger_path` (renamed) when there is none yet, and is removed otherwise.
  static Result<std::unique_ptr<TenantSegments>> open(const std::filesystem::path& dir,
                                                      const std::filesystem::path& ledger_path,
                                                      unsigned quota_mode = 0644);

  TenantQuota& quota() { return *quota_; }
  TenantLedger& ledger() { return *ledger_; }
  const TenantQuota& quota() const { return *quota_; }
  const TenantLedger& ledger() const { return *ledger_; }
  bool ledger_reused() const { return ledger_reused_; }      // a valid ledger file was found
  bool ledger_migrated() const { return ledger_migrated_; }  // it came from <dir>/ledger
  // An existing ledger with a bad header, rebuilt from its slots (segment_recovery.h).
  bool ledger_rebuilt() const { return ledger_rebuilt_; }
  // The ledger was rebuilt or re-created while the quota file was already there: live
  // processes that map the quota may have lost their slots. True once, for the caller that
  // holds their memory until they re-register (ledger_rebuild.h).
  bool lost_ledger() const { return lost_ledger_; }
  bool take_lost_ledger() { return std::exchange(lost_ledger_, false); }
  // A ledger whose header turned invalid while the broker runs (zeroed under it) is rebuilt
  // from its slots, as at open, with a new incarnation; false when the header is valid.
  bool rebuild_if_damaged();
  // The quota file's identity: every process of the tenant maps it, by path.
  struct FileId {
    dev_t dev = 0;
    ino_t ino = 0;
  };
  FileId quota_file() const { return quota_id_; }
  // The ledger file's identity: every registered process of the tenant maps it (passed as a
  // descriptor), and only those (file_mappers.h).
  FileId ledger_file() const { return {ledger_dev_, ledger_ino_}; }

  // A new descriptor of this ledger file (close-on-exec; the caller owns it), read-write
  // or read-only, for passing to a tenant process; -1 when the file at the ledger path
  // is gone or is no longer the one mapped here.
  int ledger_descriptor(bool writable) const;
  // A new READ-ONLY descriptor of the quota file (close-on-exec; the caller owns it), for
  // a host tenant's processes, which cannot open the 0600 file by path; -1 when the file
  // at the path is gone or is not the one mapped here. Being O_RDONLY, it cannot be mapped
  // writable, and reopening it through /proc/self/fd checks the file's 0600 mode again.
  int quota_descriptor() const;

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
  bool ledger_migrated_ = false;
  bool ledger_rebuilt_ = false;
  bool quota_fresh_ = false;        // re-initialised at open, until the first publish
  bool allowance_unknown_ = false;  // no broker's host_allowance in the quota, until the publish
  bool lost_ledger_ = false;
  FileId quota_id_;
  std::filesystem::path ledger_path_, quota_path_;
  dev_t ledger_dev_ = 0;
  ino_t ledger_ino_ = 0;
};

}  // namespace fracgpu::broker
