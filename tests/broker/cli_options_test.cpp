// CLI argument handling that needs no broker: where `fracgpu run`'s command starts, and
// the TENANT entries built from the quota flags.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "cli/cli_options.h"

namespace fracgpu::cli {
namespace {

class RunSplitTest : public ::testing::Test {
 protected:
  RunSplitTest() {
    app.add_option("--run-dir", run_dir);
    run = app.add_subcommand("run");
    add_quota_flags(*run, flags, true);
    run->add_option("--name", name);
    app.fallthrough();
  }
  RunSplit split(std::vector<const char*> args) {
    args.insert(args.begin(), "fracgpu");
    return split_run_command(app, *run, static_cast<int>(args.size()), args.data());
  }
  CLI::App app;
  CLI::App* run = nullptr;
  QuotaFlags flags;
  std::string run_dir, name;
};

TEST_F(RunSplitTest, CommandAfterDoubleDash) {
  auto s = split({"run", "--memory", "1GiB", "--", "python", "-c", "x"});
  EXPECT_EQ(s.parse_argc, 4);
  EXPECT_EQ(s.command, (std::vector<std::string>{"python", "-c", "x"}));
}

TEST_F(RunSplitTest, CommandWithoutDoubleDashKeepsItsFlags) {
  auto s = split({"--run-dir", "/x", "run", "--memory=1GiB", "--gpu", "0,1", "sh", "-c", "exit 7", "--", "--name"});
  EXPECT_EQ(s.parse_argc, 7);
  EXPECT_EQ(s.command, (std::vector<std::string>{"sh", "-c", "exit 7", "--", "--name"}));
}

TEST_F(RunSplitTest, OptionValuesAreNotTheCommand) {
  auto s = split({"run", "--name", "job", "--memory", "1GiB", "--run-dir", "/r", "true"});
  EXPECT_EQ(s.command, (std::vector<std::string>{"true"}));
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

}  // namespace
}  // namespace fracgpu::cli
