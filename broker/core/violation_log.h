// Where the broker keeps the violations its audit (usage_audit.h) and books check
// (books_check.h) find: counters per tenant + GPU + kind, the last few per tenant, and the
// log line for each (spdlog warn, at most kLogBurst lines per tenant per kLogWindow, then
// one line saying how many were suppressed). Rendered into the tenant status JSON
// ("violations"); the metrics (tenant_metrics.h) read series() for
// fracgpu_audit_violations_total. Loop thread only (a scrape reads under the broker's
// state mutex like everything else).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "core/usage_audit.h"

namespace fracgpu::broker {

// `t` as UTC ISO 8601 with milliseconds (2026-12-07T15:13:50.123Z): the time of a violation
// in status, shared by every violation list (violation_log.cpp, outside_usage.cpp).
std::string iso_time(std::chrono::system_clock::time_point t);

class ViolationLog {
 public:
  static constexpr std::size_t kRecent = 8;
  static constexpr int kLogBurst = 10;
  static constexpr std::chrono::seconds kLogWindow{10};

  // Counts `v`, keeps it among the tenant's recent ones and logs it (rate-limited).
  void record(const Violation& v, std::chrono::system_clock::time_point when,
              std::chrono::steady_clock::time_point now);
  void record(const Violation& v) {
    record(v, std::chrono::system_clock::now(), std::chrono::steady_clock::now());
  }
  void forget(const std::string& tenant);

  uint64_t total(const std::string& tenant) const;
  uint64_t count(const std::string& tenant, uint32_t gpu, ViolationKind kind) const;
  uint64_t log_lines() const { return log_lines_; }

  // {"total": N, "by_kind": {"over_cap": n, ...}, "recent": [{time, pid, gpu, gpu_uuid,
  //  kind, bytes, action, detail}, ...]} (most recent last).
  nlohmann::json tenant_json(const std::string& tenant) const;

  // (tenant, gpu, gpu_uuid, kind) -> count, for every series counted so far (the metrics
  // add the zeros of each tenant's own GPUs).
  using SeriesKey = std::tuple<std::string, uint32_t, std::string, uint32_t>;
  const std::map<SeriesKey, uint64_t>& series() const { return series_; }

 private:
  struct Entry {
    std::chrono::system_clock::time_point time;
    Violation violation;
  };
  struct TenantRecord {
    uint64_t total = 0;
    std::array<uint64_t, kViolationKinds> by_kind{};
    std::deque<Entry> recent;
    // Log rate limit.
    std::chrono::steady_clock::time_point window_start{};
    int lines_in_window = 0;
    uint64_t suppressed = 0;
  };
  void log(TenantRecord& r, const Violation& v, std::chrono::steady_clock::time_point now);

  std::map<std::string, TenantRecord, std::less<>> tenants_;
  std::map<SeriesKey, uint64_t> series_;
  uint64_t log_lines_ = 0;
};

}  // namespace fracgpu::broker
