// Creation, validation and in-place publication of the quota and ledger files. Files
// are created with open(2) so that mode and ownership are exact regardless of the
// umask (tenants of any uid map the ledger read-write, the quota read-only), and are
// never replaced by rename: processes keep their existing mappings, so a new inode
// would silently detach them from the broker.
#include "core/tenant_segments.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/ledger_ops.h"

namespace fracgpu::broker {
namespace {

namespace bip = boost::interprocess;

// Ensures the file exists, is a regular file of at least `size` bytes and has `mode`.
Status prepare_file(const std::filesystem::path& path, std::size_t size, mode_t mode) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return Status::failure("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  Status status;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    status = Status::failure(path.string() + " is not a regular file");
  } else if (static_cast<std::size_t>(st.st_size) < size &&
             ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    status = Status::failure("cannot size " + path.string() + ": " + std::strerror(errno));
  } else if (::fchmod(fd, mode) != 0) {
    status = Status::failure("cannot chmod " + path.string() + ": " + std::strerror(errno));
  }
  ::close(fd);
  return status;
}

void initialize_quota(TenantQuota& q) {
  std::memset(static_cast<void*>(&q), 0, sizeof(TenantQuota));
  q.major = kSegmentMajor;
  q.minor = kSegmentMinor;
  q.size = sizeof(TenantQuota);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  q.magic = kQuotaMagic;
}

uint64_t kept_grant(DeviceQuota& slot, DeviceUsage& usage, const DeviceSpec& d) {
  const uint64_t old = slot.memory_grant.load();
  if (old > d.memory_limit) ledger::lower_grant(slot, usage, d.memory_limit);
  return std::clamp(slot.memory_grant.load(), d.memory_request, d.memory_limit);
}

void publish_device(DeviceQuota& slot, DeviceUsage& usage, const DeviceSpec& d,
                    const GpuInfo* gpu) {
  // A GPU already published at this index keeps its grant; anything else starts afresh.
  const bool same_gpu = slot.present == 1 && slot.host_index == d.gpu;
  const std::string uuid = gpu ? gpu->uuid : d.uuid;
  std::memset(slot.uuid, 0, sizeof slot.uuid);
  std::memcpy(slot.uuid, uuid.data(), std::min(uuid.size(), sizeof slot.uuid - 1));
  slot.host_index = d.gpu;
  // Order matters for a concurrently reserving process: raise the limit before the
  // grant, and lower the grant (race-safely) before the limit.
  const uint64_t grant = same_gpu ? kept_grant(slot, usage, d) : d.memory_request;
  if (d.memory_limit > slot.memory_limit.load()) slot.memory_limit.store(d.memory_limit);
  if (grant < slot.memory_grant.load()) {
    ledger::lower_grant(slot, usage, grant);
  } else {
    slot.memory_grant.store(grant);
  }
  slot.memory_limit.store(d.memory_limit);
  slot.memory_request.store(d.memory_request);
  slot.context_footprint.store(gpu ? gpu->context_footprint : slot.context_footprint.load());
  slot.compute_weight.store(d.compute);
  slot.compute_ceiling_pct.store(d.compute_limit);
  slot.priority.store(static_cast<uint32_t>(d.priority));
  slot.present = 1;
}

}  // namespace

Result<std::unique_ptr<TenantSegments>> TenantSegments::open(const std::filesystem::path& dir) {
  using R = Result<std::unique_ptr<TenantSegments>>;
  const auto quota_path = dir / "quota";
  const auto ledger_path = dir / "ledger";
  if (auto s = prepare_file(quota_path, sizeof(TenantQuota), 0644); !s)
    return R::failure(s.error());
  if (auto s = prepare_file(ledger_path, sizeof(TenantLedger), 0666); !s)
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
    return R::failure("cannot map the segments in " + dir.string() + ": " + e.what());
  }
  seg->quota_ = static_cast<TenantQuota*>(seg->quota_region_.get_address());
  seg->ledger_ = static_cast<TenantLedger*>(seg->ledger_region_.get_address());
  seg->ledger_reused_ = ledger_layout_ok(*seg->ledger_, seg->ledger_region_.get_size());
  if (!quota_layout_ok(*seg->quota_, seg->quota_region_.get_size())) initialize_quota(*seg->quota_);
  if (!seg->ledger_reused_) ledger::initialize(*seg->ledger_);
  return R(std::move(seg));
}

void TenantSegments::publish(const TenantSpec& spec, const GpuInventory& gpus) {
  TenantQuota& q = *quota_;
  std::memset(q.tenant, 0, sizeof q.tenant);
  std::memcpy(q.tenant, spec.name.data(), std::min(spec.name.size(), sizeof q.tenant - 1));
  const std::size_t count = std::min(spec.devices.size(), kMaxDevices);
  for (std::size_t i = 0; i < count; ++i) {
    publish_device(q.devices[i], ledger_->devices[i], spec.devices[i],
                   gpus.find(spec.devices[i].gpu));
  }
  for (std::size_t i = count; i < kMaxDevices; ++i) q.devices[i].present = 0;
  q.device_count = static_cast<uint32_t>(count);
  q.generation.fetch_add(1);  // publishes everything above to readers polling it
}

}  // namespace fracgpu::broker
