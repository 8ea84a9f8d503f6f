// The simulated GPU as a container reaches it (issue 29, item 1; src/host_pid.h):
//  - a process in its own PID namespace (unshare --pid --fork --mount-proc: a container's
//    view, its own /proc) is recorded under its HOST pid, as the real driver does: NVML and
//    `fakecuda-ctl status` list it by the pid the host knows, and its memory comes back when
//    the host kills it;
//  - without the pid helper such a process is refused at cuInit (not recorded under a pid
//    nobody can match);
//  - a sweep from inside a PID namespace leaves the host's live processes alone;
//  - FAKECUDA_SHM_MODE=0666 lets a process of another uid (a container's user 1000) open
//    the device, like a real /dev/nvidia* node; a malformed mode keeps 0600.
// Needs root (PID namespaces, another uid); CI runs as root.
#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "child_process.h"
#include "fake_device_test.h"
#include "fracgpu/nvml_types.h"

namespace fakecuda_test {
namespace {

namespace nvml = fracgpu::nvml;
constexpr uint64_t kMiB = 1ull << 20;

// The pid of the first child of `parent` (from every /proc/<pid>/status), 0 if none.
int first_child_of(int parent) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) == 0 && std::stoi(line.substr(5)) == parent)
        return std::stoi(name);
    }
  }
  return 0;
}

class ContainerAccess : public FakeDeviceTest {
 protected:
  TestDeviceConfig device_config() const override {
    TestDeviceConfig c;
    c.memory = "2GiB";
    return c;
  }
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (PID namespaces, a second uid)";
    setenv("FAKECUDA_SHM_MODE", "0666", 1);
    FakeDeviceTest::SetUp();
    lib_ = dlopen(FAKENVML_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    init_ = reinterpret_cast<nvml::InitFn>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<nvml::InitFn>(dlsym(lib_, "nvmlShutdown"));
    handle_ =
        reinterpret_cast<nvml::GetHandleByIndexFn>(dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
    compute_ = reinterpret_cast<nvml::GetRunningProcessesFn>(
        dlsym(lib_, "nvmlDeviceGetComputeRunningProcesses_v3"));
    ASSERT_TRUE(init_ && shutdown_ && handle_ && compute_);
    ASSERT_EQ(init_(), nvml::kSuccess);
  }
  void TearDown() override {
    if (shutdown_ != nullptr) shutdown_();
    if (lib_ != nullptr) dlclose(lib_);
    unsetenv("FAKECUDA_SHM_MODE");
    if (geteuid() == 0) FakeDeviceTest::TearDown();
  }

  // NVML's bytes for `pid` on device 0 (0: not listed).
  uint64_t nvml_bytes(int pid) {
    nvml::Device device = nullptr;
    EXPECT_EQ(handle_(0, &device), nvml::kSuccess);
    nvml::ProcessInfo infos[16] = {};
    unsigned int count = 16;
    EXPECT_EQ(compute_(device, &count, infos), nvml::kSuccess);
    for (unsigned int i = 0; i < count; ++i)
      if (static_cast<int>(infos[i].pid) == pid) return infos[i].usedGpuMemory;
    return 0;
  }

  std::unique_ptr<ChildProcess> start_pid_helper() {
    auto helper =
        std::make_unique<ChildProcess>(std::vector<std::string>{FAKECUDA_CTL_PATH, "pid-helper"});
    const std::string line = helper->read_line();
    EXPECT_NE(line.find("pid helper serving /dev/shm" + shm_name + ".pids"), std::string::npos)
        << line;
    return helper;
  }

  // `fakecuda-test-child ARGS...` as pid 1 of a new PID namespace with its own /proc.
  static std::vector<std::string> in_pid_namespace(std::vector<std::string> args) {
    args.insert(args.begin(),
                {"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", child_program()});
    return args;
  }

  void* lib_ = nullptr;
  nvml::InitFn init_ = nullptr;
  nvml::InitFn shutdown_ = nullptr;
  nvml::GetHandleByIndexFn handle_ = nullptr;
  nvml::GetRunningProcessesFn compute_ = nullptr;
};

TEST_F(ContainerAccess, AProcessInItsOwnPidNamespaceIsListedUnderItsHostPid) {
  auto helper = start_pid_helper();
  ChildProcess unshare(in_pid_namespace({"hold", std::to_string(300 * kMiB)}));
  ASSERT_EQ(unshare.read_line(), "ready");
  const int host_pid = first_child_of(unshare.pid());
  ASSERT_GT(host_pid, 1);

  EXPECT_EQ(nvml_bytes(host_pid), 64 * kMiB + 300 * kMiB) << "NVML lists it by its host pid";
  EXPECT_EQ(nvml_bytes(1), 0u) << "not by pid 1, the number its namespace gives it";
  const DeviceStatus status = device_status();  // kept: `listed` points into it
  const ProcessStatus* listed = status.process(host_pid);
  ASSERT_NE(listed, nullptr) << ctl("status");
  EXPECT_TRUE(listed->alive);
  EXPECT_EQ(listed->used_bytes, 64 * kMiB + 300 * kMiB);

  // The host kills it by that pid; the host's sweep then finds it dead by that pid too.
  ASSERT_EQ(::kill(host_pid, SIGKILL), 0);
  unshare.wait();
  EXPECT_EQ(nvml_bytes(host_pid), 0u);
  EXPECT_EQ(device_status().used, 64 * kMiB) << "only this process's context is left";
}

TEST_F(ContainerAccess, WithoutThePidHelperAProcessInAnotherPidNamespaceIsRefused) {
  ChildProcess unshare(in_pid_namespace({"hold", std::to_string(100 * kMiB)}));
  const std::string said = unshare.read_line();
  EXPECT_EQ(said, "error cuInit CUDA_ERROR_OPERATING_SYSTEM");
  if (said == "ready") unshare.write_line("");  // ends its hold (the old code let it in)
  EXPECT_EQ(unshare.wait(), 1);
  EXPECT_EQ(device_status().used, 64 * kMiB) << "nothing recorded for it";
}

TEST_F(ContainerAccess, ASweepInsideAPidNamespaceLeavesTheHostsProcessesAlone) {
  CUdeviceptr mine = 0;
  ASSERT_CU(cu.cuMemAlloc_v2(&mine, 200 * kMiB));
  // `status` sweeps dead processes first; from its namespace this process is invisible.
  int exit_status = -1;
  const std::string seen = run_and_capture(
      {"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", FAKECUDA_CTL_PATH, "status"},
      &exit_status);
  EXPECT_EQ(exit_status, 0) << seen;
  EXPECT_EQ(parse_device_status(seen).used, 264 * kMiB) << seen;
  EXPECT_EQ(device_status().used, 264 * kMiB) << "the container's sweep reclaimed nothing";
  EXPECT_EQ(free_bytes(), 2048 * kMiB - 264 * kMiB);
  ASSERT_CU(cu.cuMemFree_v2(mine));
}

TEST_F(ContainerAccess, ModeZero666LetsAnotherUidUseTheDevice) {
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm" + shm_name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0666u);
  ChildProcess other({child_program(), "as-uid", "1000", "hold", std::to_string(100 * kMiB)});
  EXPECT_EQ(other.read_line(), "ready");
  EXPECT_EQ(nvml_bytes(other.pid()), 164 * kMiB);
}

TEST_F(ContainerAccess, AMalformedModeKeepsTheDeviceToItsOwner) {
  const std::string name = shm_name + "-mode";
  for (const char* bad : {"0777", "0644x", "0066", "rw"}) {
    int exit_status = -1;
    const std::string err = run_and_capture(
        {"/usr/bin/env", "FAKECUDA_SHM_NAME=" + name, std::string("FAKECUDA_SHM_MODE=") + bad,
         "/bin/sh", "-c", std::string(FAKECUDA_CTL_PATH) + " status 2>&1 >/dev/null"},
        &exit_status);
    EXPECT_EQ(exit_status, 0);
    EXPECT_NE(err.find("ignoring FAKECUDA_SHM_MODE=\"" + std::string(bad) + "\""),
              std::string::npos)
        << bad << ": " << err;
    struct stat st {};
    ASSERT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << bad;
    shm_unlink(name.c_str());
  }
}

}  // namespace
}  // namespace fakecuda_test
