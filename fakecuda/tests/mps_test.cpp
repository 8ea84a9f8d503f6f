// The simulated MPS (src/mps_state.h, src/mps_server.h, tools/fakecuda_mps_control.cpp)
// against what the real control daemon and server do: the daemon's interface (pid file,
// a second daemon refused, a missing pipe directory, quit), clients found through
// CUDA_MPS_PIPE_DIRECTORY, spatial sharing by blocks, priorities ordering queued kernels
// but never preempting a running one, a non-MPS process time-sliced against the server, a
// fatal fault reaching every client, a client of another uid queued, and the daemon's death.
// Each test has its own simulated device and pipe directory; clients are
// fakecuda-test-child processes ("serve"), timed with 50-100 ms kernels so that the
// checks hold on a loaded machine.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "child_process.h"
#include "fake_device_test.h"

namespace fakecuda_test {
namespace {

using std::chrono::milliseconds;

// Alive and not a zombie (a daemon that exited waits for its reaper, init, a while).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const std::size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

// "ran <elapsed_us> <CUresult>" -> elapsed ms (negative if malformed), result.
std::pair<double, std::string> parse_ran(const std::string& line) {
  char result[64] = {};
  long long us = -1;
  if (std::sscanf(line.c_str(), "ran %lld %63s", &us, result) != 2) return {-1, line};
  return {static_cast<double>(us) / 1000.0, result};
}

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string id = std::to_string(::getpid()) + "-" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    shm_name_ = "/fakecuda-mps-" + std::to_string(std::hash<std::string>{}(id));
    dir_ = std::filesystem::temp_directory_path() / ("fakecuda-mps-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "pipe");
    std::filesystem::create_directories(dir_ / "log");
    ::chmod(dir_.c_str(), 0755);
    ::chmod((dir_ / "pipe").c_str(), 0755);
    setenv("FAKECUDA_SHM_NAME", shm_name_.c_str(), 1);
    setenv("FAKECUDA_MEMORY", "4GiB", 1);
    setenv("FAKECUDA_CONTEXT_FOOTPRINT", "64MiB", 1);
    setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir().c_str(), 1);
    setenv("CUDA_MPS_LOG_DIRECTORY", (dir_ / "log").c_str(), 1);
    unsetenv("CUDA_MPS_CLIENT_PRIORITY");
  }
  void TearDown() override {
    clients_.clear();
    quit_daemon();
    shm_unlink(shm_name_.c_str());
    std::filesystem::remove_all(dir_);
    for (const char* name :
         {"FAKECUDA_SHM_NAME", "FAKECUDA_MEMORY", "FAKECUDA_CONTEXT_FOOTPRINT",
          "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_CLIENT_PRIORITY"})
      unsetenv(name);
  }

  std::string pipe_dir() const { return (dir_ / "pipe").string(); }
  int start_daemon() {
    int status = -1;
    run_and_capture({FAKECUDA_MPS_CONTROL_PATH, "-d"}, &status);
    return status;
  }
  pid_t daemon_pid() const {
    std::ifstream file(pipe_dir() + "/nvidia-cuda-mps-control.pid");
    pid_t pid = 0;
    file >> pid;
    return pid;
  }
  std::string control(const std::string& commands) {
    const std::string script = "printf '" + commands + "' | " FAKECUDA_MPS_CONTROL_PATH;
    return run_and_capture({"/bin/sh", "-c", script});
  }
  void quit_daemon() {
    const pid_t pid = daemon_pid();
    if (pid <= 0 || !running(pid)) return;
    control("quit\\n");
    for (int i = 0; i < 300 && running(pid); ++i) std::this_thread::sleep_for(milliseconds(10));
    if (running(pid)) ::kill(pid, SIGKILL);  // the daemon this test started
  }
  // A client ("serve" mode); `priority` -1 leaves CUDA_MPS_CLIENT_PRIORITY unset.
  ChildProcess& client(unsigned blocks, int priority = -1, const std::string& as_uid = "") {
    if (priority >= 0)
      setenv("CUDA_MPS_CLIENT_PRIORITY", std::to_string(priority).c_str(), 1);
    else
      unsetenv("CUDA_MPS_CLIENT_PRIORITY");
    std::vector<std::string> argv = {child_program()};
    if (!as_uid.empty()) argv.insert(argv.end(), {"as-uid", as_uid});
    argv.insert(argv.end(), {"serve", std::to_string(blocks)});
    clients_.push_back(std::make_unique<ChildProcess>(argv));
    unsetenv("CUDA_MPS_CLIENT_PRIORITY");
    return *clients_.back();
  }
  ChildProcess& ready_client(unsigned blocks, int priority = -1) {
    ChildProcess& c = client(blocks, priority);
    EXPECT_EQ(c.read_line(), "ready");
    return c;
  }
  // `fakecuda-ctl status`, searched as text (the fields are fixed: status_report.cpp).
  struct Status {
    std::string text;
    bool has(const std::string& needle) const { return text.find(needle) != std::string::npos; }
  };
  Status status() { return Status{run_and_capture({FAKECUDA_CTL_PATH, "status"})}; }

  std::string shm_name_;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<ChildProcess>> clients_;
};

TEST_F(MpsTest, TheDaemonBehavesLikeNvidiaCudaMpsControl) {
  // The pipe directory must exist (the real daemon: "Cannot access CUDA_MPS_PIPE_DIRECTORY").
  setenv("CUDA_MPS_PIPE_DIRECTORY", (dir_ / "missing").c_str(), 1);
  int status = -1;
  run_and_capture({FAKECUDA_MPS_CONTROL_PATH, "-d"}, &status);
  EXPECT_NE(status, 0);
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir().c_str(), 1);
  ASSERT_EQ(start_daemon(), 0);
  const pid_t pid = daemon_pid();
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(running(pid));
  EXPECT_TRUE(std::filesystem::exists(pipe_dir() + "/control"));
  // A second daemon on the same pipe directory is refused, the first one stays.
  EXPECT_NE(start_daemon(), 0);
  EXPECT_EQ(daemon_pid(), pid);
  // No client yet: no server.
  EXPECT_EQ(control("get_server_list\\n"), "");
  ChildProcess& c = ready_client(132);
  EXPECT_EQ(control("get_server_list\\n"), std::to_string(pid) + "\n");
  EXPECT_EQ(control("get_client_list " + std::to_string(pid) + "\\n"),
            std::to_string(c.pid()) + "\n");
  // quit: no new clients; the daemon exits once its clients have.
  control("quit\\n");
  ChildProcess& late = client(132);
  EXPECT_EQ(late.read_line(), "init CUDA_ERROR_MPS_SERVER_NOT_READY");
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_TRUE(running(pid)) << "quit before its client exited";
  c.write_line("run 1000");
  EXPECT_EQ(parse_ran(c.read_line()).second, "CUDA_SUCCESS");
  c.write_line("quit");
  EXPECT_EQ(c.wait(), 0);
  for (int i = 0; i < 300 && running(pid); ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_FALSE(running(pid)) << "the daemon did not exit after quit";
  EXPECT_FALSE(std::filesystem::exists(pipe_dir() + "/nvidia-cuda-mps-control.pid"));
}

TEST_F(MpsTest, ClientsAreReportedWithTheirPriority) {
  ASSERT_EQ(start_daemon(), 0);
  ChildProcess& normal = ready_client(132, 0);
  ChildProcess& below = ready_client(132, 1);
  const auto s = status();
  const std::string server = std::to_string(daemon_pid());
  EXPECT_TRUE(s.has("{\"pid\": " + std::to_string(normal.pid())) &&
              s.has("\"mps_server_pid\": " + server + ", \"mps_priority\": 0"))
      << s.text;
  EXPECT_TRUE(s.has("\"mps_server_pid\": " + server + ", \"mps_priority\": 1")) << s.text;
  EXPECT_TRUE(s.has("\"priority\": 1")) << s.text;
  (void)below;
  // A process that finds no daemon in its pipe directory is an ordinary context.
  setenv("CUDA_MPS_PIPE_DIRECTORY", (dir_ / "log").c_str(), 1);
  ChildProcess& plain = ready_client(132);
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir().c_str(), 1);
  const auto t = status();
  const std::size_t at = t.text.find("{\"pid\": " + std::to_string(plain.pid()));
  ASSERT_NE(at, std::string::npos) << t.text;
  EXPECT_EQ(t.text.substr(at, t.text.find('}', at) - at).find("mps_server_pid"), std::string::npos)
      << t.text;
}

// Kernels of half the SMs each run side by side; kernels of the whole device one after
// the other (in arrival order: nothing preempts a running kernel).
TEST_F(MpsTest, ClientsShareTheDeviceBySMs) {
  ASSERT_EQ(start_daemon(), 0);
  for (const unsigned blocks : {66u, 132u}) {
    ChildProcess& a = ready_client(blocks);
    ChildProcess& b = ready_client(blocks);
    a.write_line("run 100000");
    b.write_line("run 100000");
    const double ta = parse_ran(a.read_line()).first, tb = parse_ran(b.read_line()).first;
    if (blocks == 66) {
      EXPECT_LT(std::max(ta, tb), 160)
          << "half-device kernels did not overlap: " << ta << " " << tb;
    } else {
      EXPECT_GT(std::max(ta, tb), 180) << "whole-device kernels overlapped: " << ta << " " << tb;
      EXPECT_LT(std::max(ta, tb), 300) << ta << " " << tb;
    }
    a.write_line("quit");
    b.write_line("quit");
    a.wait();
    b.wait();
  }
  // Busy time is SM time: what ran adds up to about 2 x 100 ms x 0.5 + 2 x 100 ms.
  const auto s = status();
  const std::size_t at = s.text.find("\"busy_us\": ");
  ASSERT_NE(at, std::string::npos);
  const double busy_ms = std::atof(s.text.c_str() + at + 11) / 1000.0;
  EXPECT_NEAR(busy_ms, 300, 30) << s.text;
}

// CUDA_MPS_CLIENT_PRIORITY orders queued kernels (0 first) but does not preempt the
// running one: the H200 showed a latency request waiting for the running batch kernel
// with and without it.
TEST_F(MpsTest, PriorityOrdersQueuedKernelsButDoesNotPreempt) {
  ASSERT_EQ(start_daemon(), 0);
  ChildProcess& running = ready_client(132, 1);
  ChildProcess& below = ready_client(132, 1);
  ChildProcess& normal = ready_client(132, 0);
  running.write_line("run 100000");
  std::this_thread::sleep_for(milliseconds(20));
  below.write_line("run 50000");
  std::this_thread::sleep_for(milliseconds(20));
  normal.write_line("run 50000");
  const double t_running = parse_ran(running.read_line()).first;
  const double t_normal = parse_ran(normal.read_line()).first;
  const double t_below = parse_ran(below.read_line()).first;
  // The running kernel finishes on time; the priority-0 one then goes first (it waited
  // ~60 ms for the running kernel, ran 50), the earlier priority-1 one after it.
  EXPECT_LT(t_running, 140) << t_running;
  EXPECT_NEAR(t_normal, 110, 35) << t_normal;
  EXPECT_GT(t_below, t_normal + 30) << t_below << " vs " << t_normal;
}

// The server is one context on the engine: a non-MPS process time-slices against it and
// the engine never runs two contexts at once.
TEST_F(MpsTest, AnOrdinaryContextTimeSlicesWithTheServer) {
  ASSERT_EQ(start_daemon(), 0);
  ChildProcess& mps = ready_client(132);
  setenv("CUDA_MPS_PIPE_DIRECTORY", (dir_ / "log").c_str(), 1);
  ChildProcess& plain = ready_client(1);
  setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir().c_str(), 1);
  mps.write_line("run 200000");
  plain.write_line("run 200000");
  const double tm = parse_ran(mps.read_line()).first, tp = parse_ran(plain.read_line()).first;
  EXPECT_GT(std::max(tm, tp), 360)
      << "the server and an ordinary context overlapped: " << tm << " " << tp;
  EXPECT_NE(status().text.find("\"overlap_violations\": 0"), std::string::npos) << status().text;
}

// A fatal fault of one client reaches the others; the device refuses new contexts of the
// server until every client the fault hit has exited (the real server's error containment).
TEST_F(MpsTest, AFatalFaultReachesEveryClient) {
  ASSERT_EQ(start_daemon(), 0);
  ChildProcess& bad = ready_client(132);
  ChildProcess& good = ready_client(132);
  bad.write_line("fault");
  EXPECT_EQ(bad.read_line(), "faulted CUDA_ERROR_ILLEGAL_ADDRESS");
  good.write_line("sync");
  EXPECT_EQ(good.read_line(), "synced CUDA_ERROR_ILLEGAL_ADDRESS");
  ChildProcess& newcomer = client(132);
  EXPECT_EQ(newcomer.read_line(), "init CUDA_ERROR_MPS_SERVER_NOT_READY");
  bad.write_line("quit");
  good.write_line("quit");
  bad.wait();
  good.wait();
  ChildProcess& after = ready_client(132);
  after.write_line("run 1000");
  EXPECT_EQ(parse_ran(after.read_line()).second, "CUDA_SUCCESS");
}

// The server serves the uid of its first client; a client of another uid waits in cuInit
// until the server has no clients left (the real control daemon queues it).
TEST_F(MpsTest, AClientOfAnotherUidWaitsUntilTheServerIsFree) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a client as another uid";
  ASSERT_EQ(start_daemon(), 0);
  ::chmod(("/dev/shm" + shm_name_).c_str(), 0666);  // the other uid maps the same device
  ChildProcess& first = ready_client(132);
  ChildProcess& other = client(132, -1, "65534");
  EXPECT_EQ(other.read_line(500), "") << "a client of another uid was admitted";
  first.write_line("quit");
  first.wait();
  EXPECT_EQ(other.read_line(5000), "ready");
  const auto s = status();
  EXPECT_TRUE(s.has("\"uid\": 65534")) << s.text;
}

// A killed daemon takes its server with it: the clients' work fails, and a process that
// starts afterwards is an ordinary context.
TEST_F(MpsTest, ClientsFailWhenTheDaemonIsKilled) {
  ASSERT_EQ(start_daemon(), 0);
  ChildProcess& c = ready_client(132);
  c.write_line("launch 500000");
  EXPECT_EQ(c.read_line(), "launched CUDA_SUCCESS");
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_EQ(::kill(daemon_pid(), SIGKILL), 0);  // the daemon this test started
  c.write_line("sync");
  EXPECT_EQ(c.read_line(), "synced CUDA_ERROR_MPS_CONNECTION_FAILED");
  ChildProcess& after = ready_client(132);
  after.write_line("run 1000");
  EXPECT_EQ(parse_ran(after.read_line()).second, "CUDA_SUCCESS");
  EXPECT_FALSE(status().has("\"mps_server_pid\"")) << status().text;
}

}  // namespace
}  // namespace fakecuda_test
