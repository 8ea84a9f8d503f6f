// The shim's environment parsing: defaults, accepted spellings, and bad values that
// are reported and ignored rather than breaking the application; and the node's facts
// (read_node_facts, preload_names, inspect_path) over a layout the test builds.
#include "core/shim_config.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
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

// A scratch directory (removed afterwards) in which a test lays out a node's files.
class NodeFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/fgnode-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    paths_.default_socket = root_ + "/pod/broker.sock";
    paths_.run_dir = root_ + "/run";
    paths_.preload_file = root_ + "/ld.so.preload";
    std::filesystem::create_directories(root_ + "/pod");
    std::filesystem::create_directories(paths_.run_dir);
  }
  void TearDown() override {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  void bind_socket(const std::string& path) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  }

  std::string root_;
  NodePaths paths_;
  int listen_fd_ = -1;
};

TEST_F(NodeFiles, NothingSetUp) {
  NodeFacts f = read_node_facts(paths_, root_ + "/lib/libfracgpu.so");
  EXPECT_FALSE(f.pod_socket);
  EXPECT_FALSE(f.preloaded_by_node);
  EXPECT_FALSE(f.node_broker_uid);
}

TEST_F(NodeFiles, PodSocketMustBeASocket) {
  write(paths_.default_socket, "not a socket");
  EXPECT_FALSE(read_node_facts(paths_, "").pod_socket);
  ::unlink(paths_.default_socket.c_str());
  bind_socket(paths_.default_socket);
  EXPECT_TRUE(read_node_facts(paths_, "").pod_socket);
}

TEST_F(NodeFiles, NodeBrokerIsItsLockFileAndItsOwner) {
  const std::string lock = paths_.run_dir + "/broker.lock";
  write(lock, "123\n");
  NodeFacts f = read_node_facts(paths_, "");
  ASSERT_TRUE(f.node_broker_uid);
  EXPECT_EQ(*f.node_broker_uid, ::geteuid());
  if (::geteuid() == 0) {
    ASSERT_EQ(::chown(lock.c_str(), 4321, 4321), 0);
    EXPECT_EQ(*read_node_facts(paths_, "").node_broker_uid, 4321u);
  }
  ::unlink(lock.c_str());
  std::filesystem::create_directory(lock);  // not a regular file
  EXPECT_FALSE(read_node_facts(paths_, "").node_broker_uid);
}

TEST_F(NodeFiles, PreloadFileNamingThisShimByAnyPath) {
  std::filesystem::create_directories(root_ + "/lib");
  const std::string shim = root_ + "/lib/libfracgpu.so";
  write(shim, "");
  std::filesystem::create_symlink(shim, root_ + "/link.so");
  write(paths_.preload_file, "/nonexistent/libother.so\n" + root_ + "/./lib/../link.so\n");
  EXPECT_TRUE(read_node_facts(paths_, shim).preloaded_by_node);
  EXPECT_FALSE(read_node_facts(paths_, "").preloaded_by_node);  // own path unknown
  write(paths_.preload_file, "/nonexistent/libother.so " + root_ + "/lib/libfracgpu.so.bak");
  EXPECT_FALSE(read_node_facts(paths_, shim).preloaded_by_node);
}

TEST(PreloadNames, SeparatorsAndMissingFiles) {
  EXPECT_TRUE(
      preload_names("/a.so:/proc/self/exe\t/b.so", std::filesystem::canonical("/proc/self/exe")));
  EXPECT_FALSE(preload_names("", "/x"));
  EXPECT_FALSE(preload_names("/nonexistent", ""));
}

TEST_F(NodeFiles, InspectPathResolvesLinksAndListsEveryEntry) {
  std::filesystem::create_directories(root_ + "/run/tenants/a");
  bind_socket(root_ + "/run/tenants/a/broker.sock");
  std::filesystem::create_directory_symlink(root_ + "/run/tenants", root_ + "/t");
  std::string canonical, error;
  std::vector<PathEntry> entries;
  ASSERT_TRUE(inspect_path(root_ + "/t/a/broker.sock", &canonical, &entries, &error)) << error;
  const std::string real_root = std::filesystem::canonical(root_).string();
  EXPECT_EQ(canonical, real_root + "/run/tenants/a/broker.sock");
  ASSERT_GE(entries.size(), 5u);
  EXPECT_EQ(entries.front().path, "/");
  EXPECT_EQ(entries.back().path, canonical);
  EXPECT_TRUE(S_ISSOCK(entries.back().mode));
  EXPECT_EQ(entries[entries.size() - 2].path, real_root + "/run/tenants/a");
  EXPECT_TRUE(S_ISDIR(entries[entries.size() - 2].mode));
  for (std::size_t i = 1; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].path.rfind(entries[i - 1].path, 0), 0u) << entries[i].path;
  }
  EXPECT_FALSE(inspect_path(root_ + "/missing.sock", &canonical, &entries, &error));
  EXPECT_NE(error.find("missing.sock"), std::string::npos) << error;
}

}  // namespace
}  // namespace fracgpu
