// CLI argument handling that needs no broker: where `fracgpu run`'s command starts, the
// TENANT entries built from the quota flags, --owner's users, and where `fracgpu run` takes
// its tenant from beside a node broker (cli/run_route.h).
#include "cli/cli_options.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>

#include "cli/run_route.h"

namespace fracgpu::cli {
namespace {

class RunSplitTest : public ::testing::Test {
 protected:
  RunSplitTest() {
    app.add_option("--run-dir", run_dir);
    run = app.add_subcommand("run");
    add_quota_flags(*run, flags, QuotaCommand::kRun);
    run->add_option("--name", name);
    run->add_option("--tenant", tenant);
    app.fallthrough();
  }
  RunSplit split(std::vector<const char*> args) {
    args.insert(args.begin(), "fracgpu");
    return split_run_command(app, *run, static_cast<int>(args.size()), args.data());
  }
  CLI::App app;
  CLI::App* run = nullptr;
  QuotaFlags flags;
  std::string run_dir, name, tenant;
};

TEST_F(RunSplitTest, CommandAfterDoubleDash) {
  auto s = split({"run", "--memory", "1GiB", "--", "python", "-c", "x"});
  EXPECT_EQ(s.parse_argc, 4);
  EXPECT_EQ(s.command, (std::vector<std::string>{"python", "-c", "x"}));
}

TEST_F(RunSplitTest, CommandWithoutDoubleDashKeepsItsFlags) {
  auto s = split({"--run-dir", "/x", "run", "--memory=1GiB", "--gpu", "0,1", "sh", "-c", "exit 7",
                  "--", "--name"});
  EXPECT_EQ(s.parse_argc, 7);
  EXPECT_EQ(s.command, (std::vector<std::string>{"sh", "-c", "exit 7", "--", "--name"}));
}

TEST_F(RunSplitTest, OptionValuesAreNotTheCommand) {
  auto s = split({"run", "--name", "job", "--memory", "1GiB", "--run-dir", "/r", "true"});
  EXPECT_EQ(s.command, (std::vector<std::string>{"true"}));
}

TEST_F(RunSplitTest, TenantValueIsNotTheCommand) {
  auto s = split({"run", "--tenant", "team-a", "python", "train.py"});
  EXPECT_EQ(s.command, (std::vector<std::string>{"python", "train.py"}));
}

TEST_F(RunSplitTest, NoCommandOrOtherSubcommand) {
  EXPECT_TRUE(split({"run", "--memory", "1GiB"}).command.empty());
  auto other = split({"status", "--json"});
  EXPECT_TRUE(other.command.empty());
  EXPECT_EQ(other.parse_argc, 3);
}

TEST(DeviceEntries, BuildsOneEntryPerGpu) {
  QuotaFlags f;
  f.memory = "2GiB";
  f.memory_request = "1GiB";
  f.compute = "30%";
  f.priority = "high";
  auto gpus = resolve_gpus({0, 2});
  ASSERT_TRUE(gpus.ok());
  auto d = device_entries(f, *gpus, false);
  ASSERT_TRUE(d.ok()) << d.error();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[1]["gpu"], 2);
  EXPECT_EQ((*d)[0]["memory_limit"], 2ull << 30);
  EXPECT_EQ((*d)[0]["memory_request"], 1ull << 30);
  EXPECT_EQ((*d)[0]["compute"], 30);
  EXPECT_EQ((*d)[0]["priority"], "high");
}

TEST(DeviceEntries, RejectsBadFlags) {
  QuotaFlags f;
  f.memory = "1GiB";
  f.memory_request = "2GiB";
  EXPECT_FALSE(device_entries(f, {0}, false).ok());
  f.memory_request.clear();
  f.priority = "urgent";
  EXPECT_FALSE(device_entries(f, {0}, false).ok());
  f.priority.clear();
  f.compute_limit = "0";
  EXPECT_FALSE(device_entries(f, {0}, false).ok());
  EXPECT_FALSE(device_entries(QuotaFlags{}, {0}, false).ok());  // --memory missing
  EXPECT_TRUE(device_entries(QuotaFlags{}, {0}, true).ok());    // fine for an update
  EXPECT_FALSE(resolve_gpus({0, 0}).ok());
  EXPECT_FALSE(resolve_gpus({16}).ok());
  EXPECT_EQ(*resolve_gpus({}), std::vector<unsigned>{0});
}

// Per-device values: --memory 0=8GiB,1=4GiB (and --memory-request, --compute,
// --compute-limit), checked against --gpu before anything runs.
TEST(DeviceEntries, PerDeviceMapsGiveEachGpuItsOwnValues) {
  QuotaFlags f;
  f.memory = "0=8GiB,1=4GiB";
  f.memory_request = "1=1GiB,0=0";
  f.compute = "0=70,1=30%";
  f.compute_limit = "1=50";
  auto d = device_entries(f, {0, 1}, false);
  ASSERT_TRUE(d.ok()) << d.error();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0]["gpu"], 0);
  EXPECT_EQ((*d)[0]["memory_limit"], 8ull << 30);
  EXPECT_EQ((*d)[0]["memory_request"], 0u);
  EXPECT_EQ((*d)[0]["compute"], 70);
  EXPECT_FALSE((*d)[0].contains("compute_limit"));
  EXPECT_EQ((*d)[1]["gpu"], 1);
  EXPECT_EQ((*d)[1]["memory_limit"], 4ull << 30);
  EXPECT_EQ((*d)[1]["memory_request"], 1ull << 30);
  EXPECT_EQ((*d)[1]["compute"], 30);
  EXPECT_EQ((*d)[1]["compute_limit"], 50);
}

TEST(DeviceEntries, PlainValuesAndMapsMix) {
  QuotaFlags f;
  f.memory = "0=2GiB,1=3GiB";
  f.compute = "40";
  f.priority = "low";
  auto d = device_entries(f, {1, 0}, false);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ((*d)[0]["gpu"], 1);
  EXPECT_EQ((*d)[0]["memory_limit"], 3ull << 30);
  EXPECT_EQ((*d)[1]["memory_limit"], 2ull << 30);
  EXPECT_EQ((*d)[0]["compute"], 40);
  EXPECT_EQ((*d)[1]["compute"], 40);
  EXPECT_EQ((*d)[1]["priority"], "low");
}

TEST(DeviceEntries, PerDeviceMapErrorsAreClear) {
  auto error = [](QuotaFlags f, std::vector<unsigned> gpus, bool partial = false) {
    auto d = device_entries(f, gpus, partial);
    return d.ok() ? std::string("(accepted)") : d.error();
  };
  QuotaFlags f;
  f.memory = "0=8GiB,1=4GiB";
  EXPECT_EQ(error(f, {0}), "--memory names GPU 1, which is not one of the tenant's GPUs (--gpu 0)");
  f.memory = "0=8GiB,0=4GiB";
  EXPECT_EQ(error(f, {0, 1}), "--memory names GPU 0 twice");
  f.memory = "0=8GiB";
  EXPECT_EQ(error(f, {0, 1}),
            "--memory gives no cap for GPU 1 (--gpu 0,1); every GPU of the tenant needs one");
  for (const char* bad : {"0=8GiB,", "0=", "=8GiB", "x=8GiB", "0:8GiB,1=4GiB", "0=8GiB;1=4GiB",
                          "0=1=2", "123=1GiB"}) {
    f.memory = bad;
    EXPECT_NE(error(f, {0, 1}).find("must be GPU=VALUE"), std::string::npos)
        << bad << ": " << error(f, {0, 1});
  }
  f.memory = "0=8GiB,16=4GiB";
  EXPECT_EQ(error(f, {0, 1}), "--memory: 16 is not a GPU index (0-15)");
  f.memory = "0=8GiB,1=4G";  // a malformed size names its GPU
  EXPECT_EQ(error(f, {0, 1}).rfind("GPU 1: ", 0), 0u) << error(f, {0, 1});
  f.memory = "0=1GiB,1=4GiB";
  f.memory_request = "0=2GiB";
  EXPECT_EQ(error(f, {0, 1}).rfind("GPU 0: --memory-request 2GiB is larger than --memory 1GiB", 0),
            0u)
      << error(f, {0, 1});
  f.memory_request = "1=1GiB";
  f.compute = "0=101";
  EXPECT_EQ(error(f, {0, 1}).rfind("GPU 0: ", 0), 0u) << error(f, {0, 1});
  f.compute = "0=70,2=30";
  EXPECT_EQ(error(f, {0, 1}),
            "--compute names GPU 2, which is not one of the tenant's GPUs (--gpu 0,1)");
}

// `fracgpu run` without --memory: the broker is asked for what is available (and the
// request is left to its default, 0, unless given); `tenant create` still needs --memory.
TEST(DeviceEntries, RunWithoutMemoryAsksForTheAvailableMemory) {
  QuotaFlags f;
  f.memory_defaults_to_available = true;
  f.compute = "30";
  auto d = device_entries(f, {0, 1}, false);
  ASSERT_TRUE(d.ok()) << d.error();
  ASSERT_EQ(d->size(), 2u);
  for (const auto& entry : *d) {
    EXPECT_EQ(entry["memory_limit"], "available") << entry.dump();
    EXPECT_FALSE(entry.contains("memory_request")) << entry.dump();
    EXPECT_EQ(entry["compute"], 30);
  }
  f.memory_request = "1GiB";  // a guarantee without a cap of its own
  d = device_entries(f, {0}, false);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ((*d)[0]["memory_limit"], "available");
  EXPECT_EQ((*d)[0]["memory_request"], 1ull << 30);
  f.memory_request.clear();
  f.memory = "0=8GiB";  // a GPU the map leaves out gets what is available
  d = device_entries(f, {0, 1}, false);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ((*d)[0]["memory_limit"], 8ull << 30);
  EXPECT_EQ((*d)[1]["memory_limit"], "available");
  f.memory_defaults_to_available = false;
  f.memory.clear();
  d = device_entries(f, {0}, false);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error(), "--memory is required (e.g. --memory 8GiB)");
}

TEST(QuotaFlags, MemoryIsRequiredForTenantCreateOnly) {
  auto parses = [](QuotaCommand command, std::vector<const char*> args) {
    CLI::App app;
    QuotaFlags flags;
    add_quota_flags(app, flags, command);
    args.insert(args.begin(), "fracgpu");
    try {
      app.parse(static_cast<int>(args.size()), args.data());
    } catch (const CLI::ParseError&) {
      return std::make_pair(false, flags);
    }
    return std::make_pair(true, flags);
  };
  EXPECT_FALSE(parses(QuotaCommand::kCreate, {"--compute", "30"}).first);
  EXPECT_FALSE(
      parses(QuotaCommand::kCreate, {"--memory", "1GiB"}).second.memory_defaults_to_available);
  auto run = parses(QuotaCommand::kRun, {"--compute", "30"});
  EXPECT_TRUE(run.first);
  EXPECT_TRUE(run.second.memory_defaults_to_available);
  auto update = parses(QuotaCommand::kUpdate, {"--compute", "30"});
  EXPECT_TRUE(update.first);
  EXPECT_FALSE(update.second.memory_defaults_to_available);
}

TEST(DeviceEntries, PerDeviceUpdateChangesOnlyTheNamedGpus) {
  QuotaFlags f;
  f.compute = "1=80";
  auto d = device_entries(f, {0, 1}, true);
  ASSERT_TRUE(d.ok()) << d.error();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0]["gpu"], 1);
  EXPECT_EQ((*d)[0]["compute"], 80);
  f.memory = "0=1GiB";  // a partial memory map is fine in an update
  d = device_entries(f, {0, 1}, true);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d->size(), 2u);
  EXPECT_EQ(per_device_gpus(f), (std::vector<unsigned>{0, 1}));
  EXPECT_TRUE(per_device_gpus(QuotaFlags{}).empty());
}

TEST(PerDevice, ParsesSingleValuesAndMaps) {
  auto single = parse_per_device("8GiB", "--memory");
  ASSERT_TRUE(single.ok());
  EXPECT_FALSE(single->is_map);
  EXPECT_EQ(single->single, "8GiB");
  auto map = parse_per_device("1=4GiB,0=8GiB", "--memory");
  ASSERT_TRUE(map.ok()) << map.error();
  EXPECT_TRUE(map->is_map);
  EXPECT_EQ(map->entries,
            (std::vector<std::pair<unsigned, std::string>>{{1, "4GiB"}, {0, "8GiB"}}));
}

// --owner as CLI11 hands it over (repeated flags and comma lists already split).
TEST(Owners, NamesAndUidsInOrderWithoutDuplicates) {
  CLI::App app;
  std::vector<std::string> words;
  app.add_option("--owner", words)->delimiter(',');
  std::vector<const char*> argv = {"t", "--owner", "root,1000", "--owner", "0", "--owner", "42"};
  app.parse(static_cast<int>(argv.size()), argv.data());
  auto owners = resolve_owners(words);
  ASSERT_TRUE(owners.ok()) << owners.error();
  EXPECT_EQ(*owners, (std::vector<uint32_t>{0, 1000, 42}));
  EXPECT_TRUE(resolve_owners({})->empty());
}

TEST(Owners, UnknownUsersAndBadUidsAreUsageErrors) {
  auto r = resolve_owners({"root", "no-such-user-fgtest"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("no-such-user-fgtest: no such user"), std::string::npos) << r.error();
  r = resolve_owners({"4294967295"});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("is not a uid"), std::string::npos) << r.error();
  EXPECT_FALSE(resolve_owners({"99999999999999999999"}).ok());
  EXPECT_FALSE(resolve_owners({""}).ok());
  EXPECT_TRUE(resolve_owners({"4294967294"}).ok());
  std::vector<std::string> many;
  for (int i = 0; i < 65; ++i) many.push_back(std::to_string(1000 + i));
  EXPECT_FALSE(resolve_owners(many).ok());
}

TEST(Owners, ANameResolvesToItsUid) {
  const passwd* me = ::getpwuid(::getuid());
  if (me == nullptr) GTEST_SKIP() << "this uid has no passwd entry";
  auto r = resolve_owners({me->pw_name});
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(*r, (std::vector<uint32_t>{static_cast<uint32_t>(::getuid())}));
}

TEST(RunRoute, NoNodeBrokerMeansAPrivateBroker) {
  EXPECT_EQ(choose_run_route({false, false, std::nullopt, 1000, "/r"}).route,
            RunRoute::kPrivateBroker);
  EXPECT_EQ(choose_run_route({false, false, std::nullopt, 0, "/r"}).route,
            RunRoute::kPrivateBroker);
}

TEST(RunRoute, AnAnsweringAdminSocketIsUsed) {
  EXPECT_EQ(choose_run_route({false, true, 0u, 0, "/r"}).route, RunRoute::kNodeAdmin);
  EXPECT_EQ(choose_run_route({false, true, 990u, 990, "/r"}).route, RunRoute::kNodeAdmin);
}

TEST(RunRoute, AUserBesideANodeBrokerIsToldToAskForATenant) {
  RunRouteChoice c = choose_run_route({false, false, 0u, 1000, "/run/fracgpu"});
  EXPECT_EQ(c.route, RunRoute::kRefuse);
  EXPECT_NE(c.message.find("/run/fracgpu"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("does not start a private broker"), std::string::npos) << c.message;
  EXPECT_NE(c.message.find("fracgpu tenant create NAME --owner USER"), std::string::npos)
      << c.message;
  EXPECT_NE(c.message.find("--tenant NAME"), std::string::npos) << c.message;
  // The broker's own uid and root decide for themselves (a stopped node broker: private).
  EXPECT_EQ(choose_run_route({false, false, 990u, 990, "/r"}).route, RunRoute::kPrivateBroker);
  EXPECT_EQ(choose_run_route({false, false, 990u, 0, "/r"}).route, RunRoute::kPrivateBroker);
}

TEST(RunRoute, TenantJoinsOnlyANodeBroker) {
  EXPECT_EQ(choose_run_route({true, false, 0u, 1000, "/r"}).route, RunRoute::kJoinTenant);
  EXPECT_EQ(choose_run_route({true, true, 0u, 0, "/r"}).route, RunRoute::kJoinTenant);
  RunRouteChoice c = choose_run_route({true, false, std::nullopt, 1000, "/nowhere"});
  EXPECT_EQ(c.route, RunRoute::kRefuse);
  EXPECT_NE(c.message.find("/nowhere"), std::string::npos) << c.message;
}

TEST(RunRoute, NodeBrokerIsItsLockFile) {
  char pattern[] = "/tmp/fgroute-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path dir = pattern;
  EXPECT_FALSE(node_broker_uid(dir));
  EXPECT_FALSE(node_broker_uid(dir / "missing"));
  std::ofstream(dir / "broker.lock") << "1\n";
  ASSERT_TRUE(node_broker_uid(dir));
  EXPECT_EQ(*node_broker_uid(dir), ::geteuid());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fracgpu::cli
