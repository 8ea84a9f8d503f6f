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

// The broker's read-only descriptors of the tenant's ledger and (a host tenant's, whose
// file is 0600) quota; false when there is no answer.
bool view_fds(const std::string& socket_path, int* ledger_fd, int* quota_fd) {
  BrokerConnection connection;
  std::string error;
  if (!connection.connect(socket_path, 0, &error)) return false;  // one attempt: no tenant here
  auto reply = connection.request(R"({"op":"view","protocol":2})", kViewTimeoutMs, &error,
                                  ledger_fd, quota_fd);
  if (reply && wire::bool_field(*reply, "ok") == true && *ledger_fd >= 0) return true;
  for (int* fd : {ledger_fd, quota_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  return false;
}

}  // namespace

TenantView* TenantView::open(const std::string& socket_path) {
  const std::string dir = directory_of(socket_path);
  std::size_t quota_size = 0, ledger_size = 0;
  int ledger_fd = -1, quota_fd = -1;
  view_fds(socket_path, &ledger_fd, &quota_fd);
  const auto* quota = static_cast<const TenantQuota*>(
      ledger_fd < 0   ? nullptr
      : quota_fd >= 0 ? map_segment_fd(quota_fd, false, &quota_size)
                      : map_segment_file(dir + "/" + protocol::kQuotaFileName, false, &quota_size));
  const auto* ledger = static_cast<const TenantLedger*>(
      ledger_fd < 0 ? nullptr : map_segment_fd(ledger_fd, false, &ledger_size));
  if (ledger_fd >= 0) ::close(ledger_fd);
  if (quota_fd >= 0) ::close(quota_fd);
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
