// A private fracgpu-broker with one tenant on the simulated GPU, for benchmarks that
// measure the shim as a member of a tenant: started before the first CUDA call, the
// tenant created through the real CLI, FRACGPU_SOCKET pointed at it, everything
// removed at exit. Expects FRACGPU_BROKER, FRACGPU_CLI and FRACGPU_FAKECUDA_DIR.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

extern char** environ;

namespace fracgpu::bench {

// A benchmark cannot run without its set-up: say why and stop.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "benchmark set-up: %s\n", what.c_str());
  std::abort();
}

class TenantBroker {
 public:
  // `label` names the run directory; `memory` is the tenant's cap (e.g. "8GiB").
  TenantBroker(const std::string& label, const std::string& memory)
      : dir_("/tmp/fracgpu-" + label + "-" + std::to_string(getpid())) {
    const std::string run = dir_ + "/run", state = dir_ + "/state";
    const std::string driver = FRACGPU_FAKECUDA_DIR "/libcuda.so.1";
    const char* argv[] = {FRACGPU_BROKER, "--run-dir", run.c_str(), "--state-dir", state.c_str(), "--driver",
                          driver.c_str(), "--context-footprint", "auto", "--log-level", "warn", nullptr};
    if (posix_spawn(&pid_, FRACGPU_BROKER, nullptr, nullptr, const_cast<char**>(argv), environ) != 0)
      fail("cannot start the broker");
    const std::string create = std::string(FRACGPU_CLI) + " --run-dir " + run + " tenant create bench --memory " +
                               memory + " --gpu 0 > /dev/null";
    for (int i = 0; std::system(create.c_str()) != 0; ++i) {
      if (i > 100) fail("cannot create the tenant");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    setenv("FRACGPU_SOCKET", (run + "/tenants/bench/broker.sock").c_str(), 1);
  }
  ~TenantBroker() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    std::system(("rm -rf " + dir_).c_str());
  }
  TenantBroker(const TenantBroker&) = delete;
  TenantBroker& operator=(const TenantBroker&) = delete;

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

}  // namespace fracgpu::bench
