// The shim's environment parsing: defaults, accepted spellings, and bad values that
// are reported and ignored rather than breaking the application.
#include "core/shim_config.h"

#include <gtest/gtest.h>

#include <map>

namespace fracgpu {
namespace {

ShimConfig parse(const std::map<std::string, std::string>& env) {
  return parse_shim_config([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ShimConfig, DefaultsWhenNothingIsSet) {
  ShimConfig c = parse({});
  EXPECT_FALSE(c.disabled);
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  EXPECT_EQ(c.socket_path, "/run/fracgpu/broker.sock");
  EXPECT_TRUE(c.real_driver.empty());
  EXPECT_TRUE(c.problems.empty());
}

TEST(ShimConfig, ReadsEveryVariable) {
  ShimConfig c = parse({{"FRACGPU_DISABLE", "yes"},
                        {"FRACGPU_LOG_LEVEL", "DEBUG"},
                        {"FRACGPU_REAL_DRIVER", "/x/libcuda.so.1"},
                        {"FRACGPU_HOOK_STATS", "/tmp/s-%p.json"},
                        {"FRACGPU_SOCKET", "/tmp/t/broker.sock"}});
  EXPECT_TRUE(c.disabled);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.real_driver, "/x/libcuda.so.1");
  EXPECT_EQ(c.hook_stats_path, "/tmp/s-%p.json");
  EXPECT_EQ(c.socket_path, "/tmp/t/broker.sock");
}

TEST(ShimConfig, BadValuesAreReportedAndIgnored) {
  ShimConfig c = parse({{"FRACGPU_DISABLE", "maybe"}, {"FRACGPU_LOG_LEVEL", "loud"}});
  EXPECT_FALSE(c.disabled);
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  ASSERT_EQ(c.problems.size(), 2u);
  EXPECT_NE(c.problems[0].find("FRACGPU_DISABLE"), std::string::npos);
}

TEST(ShimConfig, PidPatternExpansion) {
  EXPECT_EQ(expand_pid_pattern("/tmp/stats-%p.json", 42), "/tmp/stats-42.json");
  EXPECT_EQ(expand_pid_pattern("/tmp/100%", 42), "/tmp/100%");
  EXPECT_EQ(expand_pid_pattern("%p%p", 7), "77");
}

TEST(LogLevel, Parsing) {
  LogLevel level;
  EXPECT_TRUE(parse_log_level("trace", &level));
  EXPECT_EQ(level, LogLevel::kTrace);
  EXPECT_TRUE(parse_log_level("0", &level));
  EXPECT_EQ(level, LogLevel::kError);
  EXPECT_TRUE(parse_log_level("Warning", &level));
  EXPECT_EQ(level, LogLevel::kWarn);
  EXPECT_FALSE(parse_log_level("", &level));
  EXPECT_FALSE(parse_log_level("5", &level));
  EXPECT_FALSE(parse_log_level(nullptr, &level));
}

}  // namespace
}  // namespace fracgpu
