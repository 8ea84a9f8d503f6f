// The CLI tests' common fixture: run build/bin/fracgpu as a user would (the simulated
// driver's shim, a run directory with no broker unless a test starts one) and check
// that bad input is refused with exactly one "fracgpu: ..." line and exit status 2.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "broker_harness.h"

namespace fracgpu::test {

inline std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override { FRACGPU_REQUIRE_FAKE_DRIVER(); }

  ProcessResult fracgpu(std::vector<std::string> args,
                        std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), FRACGPU_TEST_CLI_BIN);
    env.emplace("FRACGPU_SHIM", FRACGPU_TEST_SHIM);
    env.emplace("FRACGPU_RUN_DIR", (scratch.path() / "no-broker").string());
    return run_process(args, env);
  }

  void expect_usage_error(const std::vector<std::string>& args, const std::string& fragment) {
    auto r = fracgpu(args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("fracgpu: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(fragment), std::string::npos)
        << "wanted '" << fragment << "' in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }

  TempDir scratch;
};

}  // namespace fracgpu::test
