// Creation, validation and in-place publication of the quota and ledger files. Files
// are created with open(2) and then given their mode and owner through the descriptor,
// so both are exact regardless of the umask or of who created a file found there (a pod's
// quota is readable by all who reach it, a host tenant's and every ledger by the broker
// alone: its processes get descriptors). Neither is ever replaced by
// a new file: processes keep their existing mappings, so a new inode would silently
// detach them from the broker; the old layout's ledger is moved with rename(2), which
// keeps the inode. A ledger found with a bad header is rebuilt from its processes' slots
// (segment_recovery.h), never zeroed; a quota found bad is re-initialised and then
// re-published with grants that cover what the tenant already uses. A valid ledger of an
// older, smaller layout is extended in place (zeros) and its header raised to this one's.
#include "core/tenant_segments.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/ledger_ops.h"
#include "core/segment_recovery.h"
#include "fracgpu/futex_word.h"
#include "fracgpu/paths.h"
#include "fracgpu/protocol.h"

namespace fracgpu::broker {
namespace {

namespace bip = boost::interprocess;

// Ensures the file exists, is a regular file of at least `size` bytes, has `mode` and
// belongs to the broker's uid (a file of another uid found there is taken over, or
// refused when the broker may not chown).
Status prepare_file(const std::filesystem::path& path, std::size_t size, mode_t mode) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return Status::failure("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = Status::failure(path.string() + " is not a regular file");
  } else if (st.st_uid != ::geteuid() && ::fchown(fd, ::geteuid(), ::getegid()) != 0) {
    status = Status::failure(path.string() + " belongs to uid " + std::to_string(st.st_uid) +
                             " and cannot be taken over: " + std::strerror(errno));
  } else if (static_cast<std::size_t>(st.st_size) < size &&
             ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    status = Status::failure("cannot size " + path.string() + ": " + std::strerror(errno));
  } else if (::fchmod(fd, mode) != 0) {
    status = Status::failure("cannot chmod " + path.string() + ": " + std::strerror(errno));
  }
  ::close(fd);
  return status;
}

// The old layout kept the ledger beside the quota, world-writable. Moves it to
// `ledger_path` (same inode: processes that map it stay counted) unless a ledger is
// already there, in which case the old file is only a path into the books that a
// tenant could still open, and goes. True when a file was moved.
bool migrate_old_ledger(const std::filesystem::path& dir,
                        const std::filesystem::path& ledger_path) {
  const std::filesystem::path old = dir / protocol::kLedgerFileName;
  struct stat st {};
  if (::lstat(old.c_str(), &st) != 0) return false;
  struct stat existing {};
  const bool have_new = ::lstat(ledger_path.c_str(), &existing) == 0;
  if (!have_new && S_ISREG(st.st_mode)) {
    if (::rename(old.c_str(), ledger_path.c_str()) == 0) {
      if (st.st_nlink > 1) {
        spdlog::warn("the ledger moved from {} to {} has {} other name(s) on this file system",
                     old.string(), ledger_path.string(), st.st_nlink - 1);
      }
      spdlog::info("moved the ledger {} to {} (the old layout's path is gone)", old.string(),
                   ledger_path.string());
      return true;
    }
    spdlog::error("cannot move the ledger {} to {}: {}", old.string(), ledger_path.string(),
                  std::strerror(errno));
  }
  if (::unlink(old.c_str()) == 0) {
    spdlog::warn("removed {}: the tenant's ledger is {}", old.string(), ledger_path.string());
  } else {
    spdlog::error("cannot remove {}: {}", old.string(), std::strerror(errno));
  }
  return false;
}

void initialize_quota(TenantQuota& q) {
  std::memset(static_cast<void*>(&q), 0, sizeof(TenantQuota));
  q.major = kSegmentMajor;
  q.minor = kSegmentMinor;
  q.size = sizeof(TenantQuota);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  q.magic = kQuotaMagic;
}

// A value of TenantQuota.ledger_incarnation never used before: the wall clock mixed down
// to 32 bits (a re-initialised quota starts again from 0, so a counter alone could repeat
// the value a process saw), never 0 and never the current one.
void new_incarnation(TenantQuota& q) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const uint32_t old = q.ledger_incarnation.load();
  uint32_t next = static_cast<uint32_t>(static_cast<uint64_t>(now.tv_sec) * 1000003u) ^
                  static_cast<uint32_t>(now.tv_nsec);
  if (next == 0 || next == old) next = old + 1 == 0 ? 1 : old + 1;
  q.ledger_incarnation.store(next);
  futex_wake_all(q.ledger_incarnation);  // processes waiting on it re-register at once
}

// A valid ledger of an older layout (minor < 6, without host_reserved) adopted by this
// broker: prepare_file extended the file with zeros to sizeof(TenantLedger) before it was
// mapped, and the header now says so, so that the processes that map it from now on may
// keep a swap reserve (tenant_segment.h, "The swap reserve"). The words are zeroed first
// whatever the file held there: no process wrote them (one of the older layout maps less;
// a newer shim that mapped the old size keeps no reserve, it checks its mapping's size).
// True when the header changed.
bool extend_old_layout(TenantLedger& l) {
  if (l.size >= sizeof(TenantLedger)) return false;
  for (std::atomic<uint64_t>& held : l.host_reserved) held.store(0);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  l.size = sizeof(TenantLedger);
  l.minor = std::max(l.minor, kSegmentMinor);
  return true;
}

void log_rebuild(const std::filesystem::path& path, const LedgerRebuild& r, const char* when) {
  spdlog::warn(
      "{}: the ledger header was not valid{}; rebuilt it from its processes' slots ({} live "
      "process(es) kept, {} damaged or dead slot(s) cleared{})",
      path.string(), when, r.live_slots, r.cleared_slots,
      r.settled ? "" : ", counters set from a best-effort sum");
}

uint64_t kept_grant(DeviceQuota& slot, DeviceUsage& usage, const DeviceSpec& d) {
  const uint64_t old = slot.memory_grant.load();
  if (old > d.memory_limit) ledger::lower_grant(slot, usage, d.memory_limit);
  return std::clamp(slot.memory_grant.load(), d.memory_request, d.memory_limit);
}

// `fresh_quota`: the quota file was just re-initialised (it was found damaged) while the
// ledger may still count live usage; the grant then starts at what is used (within the
// tenant's bounds), so that the processes are not left over their grant.
// `allowance_unknown`: the quota holds no host_allowance of a broker (re-initialised, or
// of a layout before minor 7): it starts at what the ledger says is on host, within the cap,
// once (tenant_segment.h, "The broker's swap books"); a new tenant's ledger says 0.
void publish_device(DeviceQuota& slot, DeviceUsage& usage, const DeviceSpec& d, const GpuInfo* gpu,
                    bool fresh_quota, bool allowance_unknown) {
  if (allowance_unknown) slot.host_allowance.store(std::min(usage.swapped.load(), d.memory_limit));
  // A GPU already published at this index keeps its grant; anything else starts afresh.
  const bool same_gpu = slot.present == 1 && slot.host_index == d.gpu;
  const uint64_t fresh_grant = fresh_quota
                                   ? std::clamp(usage.used.load(), d.memory_request, d.memory_limit)
                                   : d.memory_request;
  const std::string uuid = gpu ? gpu->uuid : d.uuid;
  std::memset(slot.uuid, 0, sizeof slot.uuid);
  std::memcpy(slot.uuid, uuid.data(), std::min(uuid.size(), sizeof slot.uuid - 1));
  slot.host_index = d.gpu;
  // Order matters for a concurrently reserving process: raise the limit before the
  // grant, and lower the grant (race-safely) before the limit.
  const uint64_t grant = same_gpu ? kept_grant(slot, usage, d) : fresh_grant;
  if (d.memory_limit > slot.memory_limit.load()) slot.memory_limit.store(d.memory_limit);
  if (grant < slot.memory_grant.load()) {
    ledger::lower_grant(slot, usage, grant);
  } else {
    slot.memory_grant.store(grant);
  }
  slot.memory_limit.store(d.memory_limit);
  // lower_grant raises the grant back over what is in use, up to the limit it read: the
  // old one when the limit comes down. A tenant using more than its new limit keeps
  // that memory, but its grant drops to the new limit (docs/configuration.md, "Updates"),
  // so that further allocations fail and the quota stays within [request, limit].
  if (slot.memory_grant.load() > d.memory_limit) slot.memory_grant.store(d.memory_limit);
  slot.memory_request.store(d.memory_request);
  slot.context_footprint.store(gpu ? gpu->context_footprint : slot.context_footprint.load());
  slot.compute_weight.store(d.compute);
  slot.compute_ceiling_pct.store(d.compute_limit);
  slot.priority.store(static_cast<uint32_t>(d.priority));
  // Swap (minor 3): no demand until the guarantee enforcer makes one (it re-derives its
  // demands every tick, so a restart or an update loses nothing by starting afresh).
  slot.resident_target.store(kNoResidentTarget);
  slot.swap_policy.store(d.swap ? kSwapAllow : kSwapNever);
  // The swap reserve (minor 6) is planned again at the enforcer's next tick; one planned for
  // another GPU at this index is not this one's.
  if (!same_gpu) slot.host_reserve.store(0);
  slot.present = 1;
}

}  // namespace

Result<std::unique_ptr<TenantSegments>> TenantSegments::open(
    const std::filesystem::path& dir, const std::filesystem::path& ledger_path,
    unsigned quota_mode) {
  using R = Result<std::unique_ptr<TenantSegments>>;
  const auto quota_path = dir / protocol::kQuotaFileName;
  const bool migrated = migrate_old_ledger(dir, ledger_path);
  std::error_code exists_ec;
  const bool ledger_existed = std::filesystem::exists(ledger_path, exists_ec);
  const bool quota_existed = std::filesystem::exists(quota_path, exists_ec);
  if (auto s = prepare_file(quota_path, sizeof(TenantQuota), static_cast<mode_t>(quota_mode)); !s)
    return R::failure(s.error());
  if (auto s = prepare_file(ledger_path, sizeof(TenantLedger), paths::kLedgerMode); !s)
    return R::failure(s.error());
  std::unique_ptr<TenantSegments> seg(new TenantSegments());
  try {
    seg->quota_file_ = bip::file_mapping(quota_path.c_str(), bip::read_write);
    seg->quota_region_ =
        bip::mapped_region(seg->quota_file_, bip::read_write, 0, sizeof(TenantQuota));
    seg->ledger_file_ = bip::file_mapping(ledger_path.c_str(), bip::read_write);
    seg->ledger_region_ =
        bip::mapped_region(seg->ledger_file_, bip::read_write, 0, sizeof(TenantLedger));
  } catch (const bip::interprocess_exception& e) {
    return R::failure("cannot map the segments of " + dir.string() + ": " + e.what());
  }
  struct stat st {};  // the mapped file's identity, for ledger_descriptor()
  if (::fstat(seg->ledger_file_.get_mapping_handle().handle, &st) != 0)
    return R::failure("cannot stat " + ledger_path.string() + ": " + std::strerror(errno));
  struct stat quota_st {};
  if (::fstat(seg->quota_file_.get_mapping_handle().handle, &quota_st) == 0)
    seg->quota_id_ = {quota_st.st_dev, quota_st.st_ino};
  seg->ledger_path_ = ledger_path;
  seg->quota_path_ = quota_path;
  seg->ledger_dev_ = st.st_dev;
  seg->ledger_ino_ = st.st_ino;
  seg->ledger_migrated_ = migrated;
  seg->quota_ = static_cast<TenantQuota*>(seg->quota_region_.get_address());
  seg->ledger_ = static_cast<TenantLedger*>(seg->ledger_region_.get_address());
  seg->ledger_reused_ = ledger_layout_ok(*seg->ledger_, seg->ledger_region_.get_size());
  if (!quota_layout_ok(*seg->quota_, seg->quota_region_.get_size())) {
    initialize_quota(*seg->quota_);
    seg->quota_fresh_ = true;
  }
  if (seg->quota_fresh_ || seg->quota_->minor < 7) {  // 7: host_allowance
    seg->allowance_unknown_ = true;
    seg->quota_->minor = std::max(seg->quota_->minor, kSegmentMinor);
  }
  if (!seg->ledger_reused_ && ledger_existed) {
    log_rebuild(ledger_path, rebuild_ledger(*seg->ledger_), "");
    seg->ledger_rebuilt_ = true;
  } else if (!seg->ledger_reused_) {
    ledger::initialize(*seg->ledger_);
    if (quota_existed)
      spdlog::warn("{}: the tenant's ledger was missing; created it anew", ledger_path.string());
  }
  if (seg->ledger_reused_ && extend_old_layout(*seg->ledger_))
    spdlog::info("{}: the ledger of an older layout now carries the swap reserve (layout 1.{})",
                 ledger_path.string(), kSegmentMinor);
  if (seg->ledger_reused_ && ledger::release_placeholders(*seg->ledger_) > 0) {
    // A broker stopped while it held the memory of a lost ledger's processes: some may not
    // have re-registered yet, so the hold starts again (ledger_rebuild.h).
    spdlog::warn(
        "{}: released the hold of a lost ledger that the previous broker kept; holding "
        "again until its processes re-register",
        ledger_path.string());
    seg->lost_ledger_ = true;
  }
  if (!seg->ledger_reused_) {
    // Stamped above; the socket serves only after open(): a process that re-registers
    // finds the new ledger.
    new_incarnation(*seg->quota_);
    seg->lost_ledger_ = quota_existed;
  }
  return R(std::move(seg));
}

bool TenantSegments::rebuild_if_damaged() {
  if (ledger_layout_ok(*ledger_, ledger_region_.get_size())) return false;
  log_rebuild(ledger_path_, rebuild_ledger(*ledger_), " while the broker ran");
  ledger_rebuilt_ = true;
  new_incarnation(*quota_);
  lost_ledger_ = true;
  return true;
}

int TenantSegments::ledger_descriptor(bool writable) const {
  const int fd =
      ::open(ledger_path_.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_dev != ledger_dev_ || st.st_ino != ledger_ino_) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int TenantSegments::quota_descriptor() const {
  const int fd = ::open(quota_path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_dev != quota_id_.dev || st.st_ino != quota_id_.ino) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void TenantSegments::publish(const TenantSpec& spec, const GpuInventory& gpus) {
  TenantQuota& q = *quota_;
  std::memset(q.tenant, 0, sizeof q.tenant);
  std::memcpy(q.tenant, spec.name.data(), std::min(spec.name.size(), sizeof q.tenant - 1));
  const std::size_t count = std::min(spec.devices.size(), kMaxDevices);
  for (std::size_t i = 0; i < count; ++i) {
    publish_device(q.devices[i], ledger_->devices[i], spec.devices[i],
                   gpus.find(spec.devices[i].gpu), quota_fresh_, allowance_unknown_);
  }
  for (std::size_t i = count; i < kMaxDevices; ++i) {
    q.devices[i].present = 0;
    q.devices[i].host_reserve.store(0);  // the planner only looks at present devices
  }
  q.device_count = static_cast<uint32_t>(count);
  q.generation.fetch_add(1);  // publishes everything above to readers polling it
  quota_fresh_ = false;
  allowance_unknown_ = false;
}

}  // namespace fracgpu::broker
