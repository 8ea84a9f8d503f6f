// ViolationLog: counting per tenant, GPU and kind, the recent list, the rate-limited log
// and the status/metrics renderings the operators see.
#include "core/violation_log.h"

#include <gtest/gtest.h>

namespace fracgpu::broker {
namespace {

const std::string kUuid = "GPU-66726163-6770-7566-616b-656770750000";

Violation unregistered(int32_t pid) {
  return Violation{
      "bypass",         0, kUuid, pid, ViolationKind::kUnregistered, 8ull << 30, "killed",
      "pid holds 8 GiB"};
}

TEST(ViolationLog, CountsKeepsTheLastEightAndRendersTheStatus) {
  ViolationLog log;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i)
    log.record(unregistered(100 + i), std::chrono::system_clock::now(), t0);
  log.record(Violation{"bypass", 0, kUuid, 0, ViolationKind::kLedger, 1, "repaired", "x"},
             std::chrono::system_clock::now(), t0);
  EXPECT_EQ(log.total("bypass"), 11u);
  EXPECT_EQ(log.total("good"), 0u);
  EXPECT_EQ(log.count("bypass", 0, ViolationKind::kUnregistered), 10u);
  const auto j = log.tenant_json("bypass");
  EXPECT_EQ(j["total"], 11);
  EXPECT_EQ(j["by_kind"]["unregistered"], 10);
  EXPECT_EQ(j["by_kind"]["ledger"], 1);
  EXPECT_EQ(j["by_kind"]["over_cap"], 0);
  ASSERT_EQ(j["recent"].size(), ViolationLog::kRecent);
  const auto& last = j["recent"].back();
  EXPECT_EQ(last["kind"], "ledger");
  EXPECT_EQ(j["recent"][0]["pid"], 103);
  for (const char* key : {"time", "pid", "gpu", "gpu_uuid", "kind", "bytes", "action", "detail"})
    EXPECT_TRUE(last.contains(key)) << key;
  EXPECT_EQ(last["time"].get<std::string>().size(), std::string("2026-01-01T00:00:00.000Z").size());
  const auto none = log.tenant_json("good");
  EXPECT_EQ(none["total"], 0);
  EXPECT_TRUE(none["recent"].empty());
  EXPECT_EQ(none["by_kind"].size(), kViolationKinds);
}

TEST(ViolationLog, TheLogIsRateLimitedPerTenant) {
  ViolationLog log;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) log.record(unregistered(i), std::chrono::system_clock::now(), t0);
  EXPECT_EQ(log.log_lines(), static_cast<uint64_t>(ViolationLog::kLogBurst));
  EXPECT_EQ(log.total("bypass"), 50u) << "counting is never limited";
  log.record(unregistered(1), std::chrono::system_clock::now(), t0 + ViolationLog::kLogWindow);
  EXPECT_EQ(log.log_lines(), static_cast<uint64_t>(ViolationLog::kLogBurst) + 2)
      << "one 'suppressed' line, then the violation";
}

TEST(ViolationLog, SeriesCountEachTenantGpuAndKindUntilForgotten) {
  ViolationLog log;
  log.record(unregistered(7));
  log.record(unregistered(8));
  using Key = ViolationLog::SeriesKey;
  const Key key{"bypass", 0, kUuid, static_cast<uint32_t>(ViolationKind::kUnregistered)};
  ASSERT_EQ(log.series().size(), 1u);
  EXPECT_EQ(log.series().at(key), 2u);
  log.forget("bypass");
  EXPECT_EQ(log.total("bypass"), 0u);
  EXPECT_TRUE(log.series().empty());
}

}  // namespace
}  // namespace fracgpu::broker
