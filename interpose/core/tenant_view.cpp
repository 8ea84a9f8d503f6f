// Read-only look at a tenant's segment files (see tenant_view.h): mapped at the first
// NVML memory query of a process outside the tenant's registration (one connect and one
// request to the broker), then two loads a query.
#include "core/tenant_view.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/broker_connection.h"
#include "core/file_mapping.h"
#include "core/wire_json.h"
#include "fracgpu/protocol.h"

namespace fracgpu {

namespace {

constexpr int kViewTimeoutMs = 1000;

// The broker's read-only descriptor of the tenant's ledger, or -1.
int ledger_view_fd(const std::string& socket_path) {
  BrokerConnection connection;
  std::string error;
  if (!connection.connect(socket_path, 0, &error)) return -1;  // one attempt: no tenant here
  int fd = -1;
  auto reply = connection.request(R"({"op":"view","protocol":2})", kViewTimeoutMs, &error, &fd);
  if (!reply || wire::bool_field(*reply, "ok") != true) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TenantView* TenantView::open(const std::string& socket_path) {
  const std::string dir = directory_of(socket_path);
  std::size_t quota_size = 0, ledger_size = 0;
  const auto* quota = static_cast<const TenantQuota*>(
      map_segment_file(dir + "/" + protocol::kQuotaFileName, false, &quota_size));
  const int ledger_fd = quota == nullptr ? -1 : ledger_view_fd(socket_path);
  const auto* ledger = static_cast<const TenantLedger*>(
      ledger_fd < 0 ? nullptr : map_segment_fd(ledger_fd, false, &ledger_size));
  if (ledger_fd >= 0) ::close(ledger_fd);
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

std::optional<DeviceMemoryView> device_memory_view(const TenantQuota& quota,
                                                   const TenantLedger& ledger, const char* uuid) {
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
