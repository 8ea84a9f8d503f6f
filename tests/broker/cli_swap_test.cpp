// Bad values of the swap flags, as a user types them: `--swap` of `fracgpu tenant
// create/update` and `fracgpu run`, and the broker's `--reclaim`, `--swap-host-budget` and
// `--swap-idle-after` (fracgpu-broker and `fracgpu broker`). Each is refused with one line
// that names the flag and a non-zero exit, before anything runs: no tenant created or
// changed, no command started, no broker serving, the state file untouched.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_fixture.h"

namespace fracgpu::test {
namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

using CliSwapTest = CliFixture;

TEST_F(CliSwapTest, ABadSwapValueIsRefusedBeforeAnythingRuns) {
  const std::string marker = (scratch.path() / "ran").string();
  for (const std::string bad : {"maybe", "", "ALLOW", "yes", "0=allow", "allow,never"}) {
    expect_usage_error({"tenant", "create", "web", "--memory", "1GiB", "--swap", bad}, "--swap");
    expect_usage_error({"tenant", "update", "web", "--swap", bad}, "--swap");
    expect_usage_error(
        {"run", "--memory", "1GiB", "--swap", bad, "--", "/bin/sh", "-c", "touch " + marker},
        "--swap");
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
}

// Against a running broker: a refused update changes nothing, a refused create creates
// nothing.
TEST_F(CliSwapTest, ARefusedSwapChangeLeavesTheTenantAsItWas) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  const auto env = broker.env();
  auto r = fracgpu({"tenant", "create", "web", "--memory", "1GiB", "--swap", "allow"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  for (const std::string bad : {"never!", "", "Allow"}) {
    r = fracgpu({"tenant", "update", "web", "--swap", bad}, env);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("--swap"), std::string::npos) << r.err;
    r = fracgpu({"tenant", "create", "other", "--memory", "1GiB", "--swap", bad}, env);
    EXPECT_EQ(r.status, 2) << bad << ": " << r.err;
  }
  auto web = broker.tenant_status("web");
  ASSERT_TRUE(web);
  EXPECT_EQ((*web)["devices"][0]["swap"], "allow") << web->dump();
  EXPECT_FALSE(broker.tenant_status("other"));
  r = fracgpu({"tenant", "update", "web", "--swap", "never"}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ((*broker.tenant_status("web"))["devices"][0]["swap"], "never");
}

// The broker's flags: the daemon and `fracgpu broker` refuse each bad value with one line
// naming the flag and exit 2; no broker serves the run directory afterwards and the
// tenants it had are kept as they were.
TEST_F(CliSwapTest, ABadBrokerSwapFlagIsRefusedAndChangesNothing) {
  BrokerProcess broker;
  ASSERT_TRUE(broker.start()) << broker.log();
  auto r =
      fracgpu({"tenant", "create", "keep", "--memory", "1GiB", "--swap", "allow"}, broker.env());
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(broker.stop(), 0);
  const auto state_file = broker.state_dir() / "tenants.json";
  const std::string before = slurp(state_file);
  ASSERT_FALSE(before.empty());
  ASSERT_FALSE(std::filesystem::exists(broker.admin_socket()));

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--reclaim", "bogus"}, "--reclaim"},
      {{"--reclaim", ""}, "--reclaim"},
      {{"--reclaim", "Kill"}, "--reclaim"},
      {{"--swap-host-budget", "12XB"}, "--swap-host-budget"},
      {{"--swap-host-budget", "-1GiB"}, "--swap-host-budget"},
      {{"--swap-host-budget", ""}, "--swap-host-budget"},
      {{"--swap-host-budget", "half"}, "--swap-host-budget"},
      {{"--swap-reserve-floor", "8XB"}, "--swap-reserve-floor"},
      {{"--swap-reserve-floor", "-1GiB"}, "--swap-reserve-floor"},
      {{"--swap-idle-after", "abc"}, "--swap-idle-after"},
      {{"--swap-idle-after", "-1"}, "--swap-idle-after"},
      {{"--swap-idle-after", ""}, "--swap-idle-after"},
      {{"--swap-idle-after", "nan"}, "--swap-idle-after"},
      {{"--swap-idle-after", "inf"}, "--swap-idle-after"},
      {{"--swap-idle-after", "1e12"}, "--swap-idle-after"},
      {{"--swap-idle-after", "10s"}, "--swap-idle-after"},
  };
  for (const auto& [flags, name] : bad) {
    std::vector<std::string> daemon = {
        FRACGPU_TEST_BROKER_BIN,     "--run-dir", broker.run_dir().string(), "--state-dir",
        broker.state_dir().string(), "--driver",  FRACGPU_TEST_FAKE_DRIVER};
    daemon.insert(daemon.end(), flags.begin(), flags.end());
    const std::string shown = flags[0] + " '" + flags[1] + "'";
    r = run_process(daemon, broker.env(), std::chrono::seconds(20));
    EXPECT_EQ(r.status, 2) << shown << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << shown << ": " << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << shown << ": " << r.err;
    std::vector<std::string> cli = {"broker", "--state-dir", broker.state_dir().string(),
                                    "--driver", FRACGPU_TEST_FAKE_DRIVER};
    cli.insert(cli.end(), flags.begin(), flags.end());
    r = fracgpu(cli, broker.env());
    EXPECT_EQ(r.status, 2) << "fracgpu broker " << shown << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1u) << shown << ": " << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << shown << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(broker.admin_socket())) << shown << ": a broker served";
  }
  EXPECT_EQ(slurp(state_file), before) << "the tenants are kept as they were";
  ASSERT_TRUE(broker.start()) << broker.log();
  auto keep = broker.tenant_status("keep");
  ASSERT_TRUE(keep);
  EXPECT_EQ((*keep)["devices"][0]["swap"], "allow");
}

}  // namespace
}  // namespace fracgpu::test
