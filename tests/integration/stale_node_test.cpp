// The shim beside a stale node layout (issue 28, "Hermetic tests"): a node broker that was
// killed leaves /run/fracgpu behind (broker.lock, admin.sock, tenants/, pods/, ledgers/),
// and the shim, which reads the node's facts from those fixed paths, holds the host to be
// a node with a broker. A FRACGPU_SOCKET that the node's rule refuses must then fail
// closed with a line that names the lock file, not only the socket, and the application
// must neither crash nor hang.
//
// The layout is made by the real broker, started on the real path /run/fracgpu and killed
// with SIGKILL: that path is this test program's own empty tmpfs (hermetic_node.cpp), so
// the host's /run is never touched. Root only (skips otherwise, with the reason).
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "client/broker_launcher.h"
#include "fracgpu/paths.h"
#include "hermetic_node.h"
#include "shim_fixture.h"

namespace fracgpu::testing {
namespace {

namespace fs = std::filesystem;

// A listening socket served by this (root) process that accepts and closes: the shim's
// node rule looks at who serves it and where it sits before it registers.
class RootListener {
 public:
  explicit RootListener(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    thread_ = std::thread([this] {
      for (;;) {
        const int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        ::close(client);
      }
    });
  }
  ~RootListener() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    ::unlink(path_.c_str());
  }

 private:
  std::string path_;
  int fd_ = -1;
  std::thread thread_;
};

class StaleNodeLayout : public ShimFixture {
 protected:
  void SetUp() override {
    if (!node_run_dir_is_private())
      GTEST_SKIP() << "no private /run/fracgpu for this test program: " << node_run_dir_state();
    ShimFixture::SetUp();
    // Hermetic: whatever the host has, this program starts beside an empty node directory.
    ASSERT_TRUE(fs::is_empty(paths::kRunDir));
    // A node broker with one tenant, killed the way a crash or a power cut would stop it.
    client::BrokerLaunch launch;
    launch.program = {FRACGPU_BROKER};
    launch.run_dir = paths::kRunDir;
    launch.state_dir = dir_.path() + "/state";
    launch.args = {"--driver", FRACGPU_FAKECUDA_DIR "/libcuda.so.1"};
    launch.environment = base_env_;
    launch.log_file = dir_.path() + "/broker.log";
    launch.ready_timeout = std::chrono::seconds(10);
    const auto started = broker_.start(launch);
    ASSERT_TRUE(started.ok()) << started.error() << "\n" << read_text(launch.log_file);
    ProcessResult r = run_process({FRACGPU_CLI, "--run-dir", paths::kRunDir, "tenant", "create",
                                   "left", "--memory", "1GiB", "--gpu", "0"},
                                  base_env_, std::chrono::seconds(30));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    broker_.kill();
    ASSERT_TRUE(fs::exists(std::string(paths::kRunDir) + "/" + paths::kBrokerLockName));
  }
  void TearDown() override {
    if (!node_run_dir_is_private()) return;
    // The next test starts beside an empty node directory again (it is this program's tmpfs).
    for (const auto& entry : fs::directory_iterator(paths::kRunDir)) fs::remove_all(entry.path());
    ShimFixture::TearDown();
  }

  // Runs the allocation client under the shim with FRACGPU_SOCKET=socket.
  ProcessResult run_app(const std::string& socket) {
    Environment env = shim_env();
    env["FRACGPU_SOCKET"] = socket;
    return run_process({FRACGPU_ALLOC_CLIENT, "info"}, env, std::chrono::seconds(30));
  }

  TempDir dir_{"stale"};
  client::BrokerProcess broker_;
};

// Each test program runs in its own mount namespace: an empty /run/fracgpu and
// /run/fracgpu-mps, every other entry of the host's /run as it is (the parent's view, ctest's
// or a shell's, is the host's), so the tests' own files and sockets never meet a node's.
TEST(HermeticNode, TheTestProgramSeesEmptyNodeDirectoriesAndTheRestOfRun) {
  if (!node_run_dir_is_private())
    GTEST_SKIP() << "no private /run/fracgpu for this test program: " << node_run_dir_state();
  EXPECT_TRUE(fs::is_empty(paths::kRunDir));
  EXPECT_TRUE(fs::is_empty("/run/fracgpu-mps"));
  const std::string parent = "/proc/" + std::to_string(::getppid());
  struct stat ours {
  }, hosts{};
  ASSERT_EQ(::stat("/proc/self/ns/mnt", &ours), 0);
  ASSERT_EQ(::stat((parent + "/ns/mnt").c_str(), &hosts), 0);
  EXPECT_NE(ours.st_ino, hosts.st_ino) << "not in a mount namespace of its own";
  for (const auto& entry : fs::directory_iterator(parent + "/root/run")) {
    const std::string name = entry.path().filename();
    if (name == "fracgpu" || name == "fracgpu-mps") continue;
    EXPECT_TRUE(fs::exists(fs::symlink_status("/run/" + name))) << "/run/" << name;
  }
}

// The case: a socket of the test's own that the node's rule refuses (here: it sits
// in a directory any user may write to). The refusal names the stale lock.
TEST_F(StaleNodeLayout, ARefusedSocketFailsClosedNamingTheNodesLock) {
  TempDir open_dir("open");
  ASSERT_EQ(::chmod(open_dir.path().c_str(), 0777), 0);
  const std::string socket = open_dir.path() + "/broker.sock";
  RootListener listener(socket);
  ProcessResult r = run_app(socket);
  EXPECT_EQ(r.signal, 0) << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("FRACGPU_SOCKET=" + socket + " is not a socket of this node's"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("/run/fracgpu/broker.lock exists (owned by uid 0)"), std::string::npos)
      << r.err;
}

// The node's own tenant socket, whose broker is gone: the registration fails closed within
// the shim's connect timeout, naming the socket.
TEST_F(StaleNodeLayout, TheDeadBrokersTenantSocketFailsClosedNamingIt) {
  const std::string socket = std::string(paths::kRunDir) + "/pods/left/broker.sock";
  ASSERT_TRUE(fs::is_socket(socket));
  ProcessResult r = run_app(socket);
  EXPECT_EQ(r.signal, 0) << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("cannot register with the fracgpu broker at " + socket), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace fracgpu::testing
