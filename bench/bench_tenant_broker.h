// For benchmarks that measure the shim as a member of a tenant, on a simulated GPU of
// their own: TenantBroker starts a private fracgpu-broker (the client library's launcher,
// client/broker_launcher.h) with one tenant (created through the real CLI, FRACGPU_SOCKET
// pointed at it, everything removed at exit), and
// ShimInTenant loads the simulated driver and the shim side by side in this process and
// makes the shim register with that tenant (cuInit, primary context current). Expects
// FRACGPU_BROKER, FRACGPU_CLI, FRACGPU_FAKECUDA_DIR and FRACGPU_SHIM_PATH.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "client/broker_launcher.h"
#include "client/run_paths.h"

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
    const std::string run = dir_ + "/run";
    client::BrokerLaunch launch;
    launch.program = {FRACGPU_BROKER};
    launch.run_dir = run;
    launch.state_dir = dir_ + "/state";
    launch.args = {"--driver",
                   FRACGPU_FAKECUDA_DIR "/libcuda.so.1",
                   "--context-footprint",
                   "auto",
                   "--log-level",
                   "warn"};
    if (auto started = broker_.start(launch); !started) fail(started.error());
    const std::string create = std::string(FRACGPU_CLI) + " --run-dir " + run +
                               " tenant create bench --memory " + memory + " --gpu 0 > /dev/null";
    if (std::system(create.c_str()) != 0) fail("cannot create the tenant");
    setenv("FRACGPU_SOCKET", client::tenant_socket_path(run, "bench", /*has_owners=*/false).c_str(),
           1);
  }
  ~TenantBroker() {
    broker_.stop();
    std::system(("rm -rf " + dir_).c_str());
  }
  TenantBroker(const TenantBroker&) = delete;
  TenantBroker& operator=(const TenantBroker&) = delete;

 private:
  std::string dir_;
  client::BrokerProcess broker_;
};

class ShimInTenant {
 public:
  // `label` names the device segment and run directory; `device_memory` sizes the
  // simulated GPU and `tenant_memory` is the tenant's cap.
  ShimInTenant(const std::string& label, const std::string& device_memory,
               const std::string& tenant_memory)
      : shm_("/fracgpu-" + label + "-" + std::to_string(getpid())) {
    setenv("FAKECUDA_SHM_NAME", shm_.c_str(), 1);  // before the broker starts: it inherits them
    setenv("FAKECUDA_MEMORY", device_memory.c_str(), 1);
    setenv("FRACGPU_REAL_DRIVER", FRACGPU_FAKECUDA_DIR "/libcuda.so.1", 1);
    broker_ = std::make_unique<TenantBroker>(label, tenant_memory);
    driver = dlopen(FRACGPU_FAKECUDA_DIR "/libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    shim = dlopen(FRACGPU_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr || shim == nullptr) fail(std::string("dlopen: ") + dlerror());
    auto init = function<decltype(&cuInit)>(shim, "cuInit");
    auto retain = function<decltype(&cuDevicePrimaryCtxRetain)>(shim, "cuDevicePrimaryCtxRetain");
    auto set_current = function<decltype(&cuCtxSetCurrent)>(driver, "cuCtxSetCurrent");
    CUcontext ctx = nullptr;
    if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
        set_current(ctx) != CUDA_SUCCESS)
      fail("CUDA set-up through the shim failed (is the tenant registered?)");
  }
  ~ShimInTenant() { shm_unlink(shm_.c_str()); }
  ShimInTenant(const ShimInTenant&) = delete;
  ShimInTenant& operator=(const ShimInTenant&) = delete;

  template <typename Fn>
  static Fn function(void* library, const char* name) {
    return reinterpret_cast<Fn>(dlsym(library, name));
  }

  void* driver = nullptr;  // the simulated libcuda, called directly
  void* shim = nullptr;    // libfracgpu.so, registered with the tenant

 private:
  std::string shm_;
  std::unique_ptr<TenantBroker> broker_;
};

}  // namespace fracgpu::bench
