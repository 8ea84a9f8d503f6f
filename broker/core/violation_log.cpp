// ViolationLog: counting, the recent list, the rate-limited log and the status JSON.
#include "core/violation_log.h"

#include <spdlog/spdlog.h>

#include <ctime>

#include "core/quantity_parser.h"

namespace fracgpu::broker {

std::string iso_time(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(ms % 1000));
  return text;
}

void ViolationLog::record(const Violation& v, std::chrono::system_clock::time_point when,
                          std::chrono::steady_clock::time_point now) {
  TenantRecord& r = tenants_[v.tenant];
  ++r.total;
  ++r.by_kind[static_cast<std::size_t>(v.kind)];
  r.recent.push_back({when, v});
  while (r.recent.size() > kRecent) r.recent.pop_front();
  ++series_[{v.tenant, v.gpu, v.gpu_uuid, static_cast<uint32_t>(v.kind)}];
  log(r, v, now);
}

void ViolationLog::log(TenantRecord& r, const Violation& v,
                       std::chrono::steady_clock::time_point now) {
  if (now - r.window_start >= kLogWindow) {
    if (r.suppressed > 0) {
      spdlog::warn("audit: tenant {}: {} more violation line(s) suppressed", v.tenant,
                   r.suppressed);
      ++log_lines_;
    }
    r.window_start = now;
    r.lines_in_window = 0;
    r.suppressed = 0;
  }
  if (r.lines_in_window >= kLogBurst) {
    ++r.suppressed;
    return;
  }
  ++r.lines_in_window;
  ++log_lines_;
  spdlog::warn("audit: tenant {}: {} violation on GPU {} ({}): {} [{}]", v.tenant,
               violation_kind_name(v.kind), v.gpu, v.gpu_uuid.empty() ? "-" : v.gpu_uuid, v.detail,
               v.action);
}

void ViolationLog::forget(const std::string& tenant) {
  tenants_.erase(tenant);
  std::erase_if(series_, [&](const auto& e) { return std::get<0>(e.first) == tenant; });
}

uint64_t ViolationLog::total(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second.total;
}

uint64_t ViolationLog::count(const std::string& tenant, uint32_t gpu, ViolationKind kind) const {
  uint64_t n = 0;
  for (const auto& [key, value] : series_) {
    if (std::get<0>(key) == tenant && std::get<1>(key) == gpu &&
        std::get<3>(key) == static_cast<uint32_t>(kind))
      n += value;
  }
  return n;
}

nlohmann::json ViolationLog::tenant_json(const std::string& tenant) const {
  nlohmann::json by_kind = nlohmann::json::object();
  nlohmann::json recent = nlohmann::json::array();
  uint64_t total = 0;
  auto it = tenants_.find(tenant);
  for (std::size_t k = 0; k < kViolationKinds; ++k) {
    by_kind[violation_kind_name(static_cast<ViolationKind>(k))] =
        it == tenants_.end() ? 0 : it->second.by_kind[k];
  }
  if (it != tenants_.end()) {
    total = it->second.total;
    for (const Entry& e : it->second.recent) {
      const Violation& v = e.violation;
      recent.push_back({{"time", iso_time(e.time)},
                        {"pid", v.pid},
                        {"gpu", v.gpu},
                        {"gpu_uuid", v.gpu_uuid},
                        {"kind", violation_kind_name(v.kind)},
                        {"bytes", v.bytes},
                        {"action", v.action},
                        {"detail", v.detail}});
    }
  }
  return {{"total", total}, {"by_kind", std::move(by_kind)}, {"recent", std::move(recent)}};
}

}  // namespace fracgpu::broker
