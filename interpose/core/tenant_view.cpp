// Read-only mapping of a tenant's segment files (see tenant_view.h).
#include "tenant_view.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "fracgpu/protocol.h"

namespace fracgpu {
namespace {

const void* map_read_only(const std::string& path, std::size_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* address = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    *size = static_cast<std::size_t>(st.st_size);
    address = ::mmap(nullptr, *size, PROT_READ, MAP_SHARED, fd, 0);
  }
  ::close(fd);
  return address == MAP_FAILED ? nullptr : address;
}

}  // namespace

TenantView* TenantView::open(const std::string& socket_path) {
  const auto slash = socket_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : socket_path.substr(0, slash);
  std::size_t quota_size = 0, ledger_size = 0;
  const auto* quota = static_cast<const TenantQuota*>(map_read_only(dir + "/" + protocol::kQuotaFileName, &quota_size));
  const auto* ledger = static_cast<const TenantLedger*>(map_read_only(dir + "/" + protocol::kLedgerFileName, &ledger_size));
  if (quota == nullptr || ledger == nullptr || !quota_layout_ok(*quota, quota_size) ||
      !ledger_layout_ok(*ledger, ledger_size)) {
    if (quota != nullptr) ::munmap(const_cast<TenantQuota*>(quota), quota_size);
    if (ledger != nullptr) ::munmap(const_cast<TenantLedger*>(ledger), ledger_size);
    return nullptr;
  }
  auto* view = new TenantView();
  view->quota_ = quota;
  view->ledger_ = ledger;
  return view;
}

std::optional<DeviceMemoryView> TenantView::device(const char* uuid) const {
  return device_memory_view(*quota_, *ledger_, uuid);
}

std::optional<DeviceMemoryView> device_memory_view(const TenantQuota& quota, const TenantLedger& ledger,
                                                   const char* uuid) {
  if (uuid == nullptr) return std::nullopt;
  for (uint32_t i = 0; i < quota.device_count && i < kMaxDevices; ++i) {
    const DeviceQuota& d = quota.devices[i];
    if (d.present != 0 && std::strncmp(d.uuid, uuid, kUuidSize) == 0) {
      return DeviceMemoryView{d.memory_limit.load(std::memory_order_relaxed),
                              ledger.devices[i].used.load(std::memory_order_relaxed)};
    }
  }
  return std::nullopt;
}

}  // namespace fracgpu
