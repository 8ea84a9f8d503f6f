// fakecuda-test-child: a second (third…) GPU client for the multi-process tests. It
// dlopens the fake driver like any CUDA application and talks to the test over
// stdin/stdout:
//   hold <bytes>                    allocate, print "ready", then wait to be killed
//   spin <millis> <kernel_us> <batch>
//                                   print "ready", wait for "go", then for <millis>
//                                   launch <batch> spin kernels of <kernel_us> and
//                                   synchronise, repeatedly; print "done <kernels>"
//   serve <blocks>                  cuInit and a context (printing "ready", or
//                                   "init <CUresult>" and exiting 1), then one reply per
//                                   command line (for the MPS tests):
//     run <us>                      a spin kernel of <blocks> blocks, then a sync:
//                                   "ran <elapsed_us> <CUresult>"
//     launch <us>                   the same without the sync: "launched <CUresult>"
//     sync                          "synced <CUresult>"
//     fault                         a fill kernel at an unmapped address, then a sync:
//                                   "faulted <CUresult>"
//     ctx                           cuCtxCreate on device 0: "ctx <CUresult>"
//     quit                          exits 0
//   ipc                             IPC commands on stdin (ipc_child.cpp)
//   as-uid <uid> <mode...>          drops to uid/gid <uid> first (the test runs as root)
// Any failure prints "error <what> <CUresult name>" and exits 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "driver_api.h"
#include "ipc_child.h"

using fakecuda_test::driver_api;
using fakecuda_test::error_name;

namespace {

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  std::printf("error %s %s\n", what, error_name(result).c_str());
  std::fflush(stdout);
  std::exit(1);
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

void init_context() {
  fakecuda_test::DriverApi& cu = driver_api();
  CUcontext context = nullptr;
  check(cu.cuInit(0), "cuInit");
  check(cu.cuDevicePrimaryCtxRetain(&context, 0), "cuDevicePrimaryCtxRetain");
  check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent");
}

int hold(uint64_t bytes) {
  init_context();
  CUdeviceptr pointer = 0;
  check(driver_api().cuMemAlloc_v2(&pointer, bytes), "cuMemAlloc");
  say("ready");
  std::string line;
  std::getline(std::cin, line);  // until the test kills us or closes stdin
  return 0;
}

int spin(long millis, uint32_t kernel_us, int batch) {
  fakecuda_test::DriverApi& cu = driver_api();
  init_context();
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  check(cu.cuModuleLoadData(&module, "image"), "cuModuleLoadData");
  check(cu.cuModuleGetFunction(&function, module, "fracgpu_fake_spin"), "cuModuleGetFunction");
  say("ready");
  std::string line;
  std::getline(std::cin, line);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(millis);
  long kernels = 0;
  void* params[] = {&kernel_us};
  while (std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < batch; ++i) {
      check(cu.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            "cuLaunchKernel");
      ++kernels;
    }
    check(cu.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  }
  std::printf("done %ld\n", kernels);
  std::fflush(stdout);
  return 0;
}

int serve(unsigned blocks) {
  fakecuda_test::DriverApi& cu = driver_api();
  CUcontext context = nullptr;
  CUresult init = cu.cuInit(0);
  if (init == CUDA_SUCCESS) init = cu.cuDevicePrimaryCtxRetain(&context, 0);
  if (init == CUDA_SUCCESS) init = cu.cuCtxSetCurrent(context);
  if (init != CUDA_SUCCESS) {
    std::printf("init %s\n", error_name(init).c_str());
    std::fflush(stdout);
    return 1;
  }
  CUmodule module = nullptr;
  CUfunction spin = nullptr, fill = nullptr;
  check(cu.cuModuleLoadData(&module, "image"), "cuModuleLoadData");
  check(cu.cuModuleGetFunction(&spin, module, "fracgpu_fake_spin"), "cuModuleGetFunction");
  check(cu.cuModuleGetFunction(&fill, module, "fracgpu_fake_fill"), "cuModuleGetFunction");
  say("ready");
  for (std::string line; std::getline(std::cin, line);) {
    const std::string command = line.substr(0, line.find(' '));
    uint32_t us = static_cast<uint32_t>(std::strtoul(line.c_str() + command.size(), nullptr, 10));
    void* spin_params[] = {&us};
    const auto start = std::chrono::steady_clock::now();
    if (command == "run" || command == "launch") {
      CUresult r = cu.cuLaunchKernel(spin, blocks, 1, 1, 1, 1, 1, 0, nullptr, spin_params, nullptr);
      if (command == "launch") {
        std::printf("launched %s\n", error_name(r).c_str());
      } else {
        if (r == CUDA_SUCCESS) r = cu.cuStreamSynchronize(nullptr);
        const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - start);
        std::printf("ran %lld %s\n", static_cast<long long>(elapsed.count()),
                    error_name(r).c_str());
      }
    } else if (command == "sync") {
      std::printf("synced %s\n", error_name(cu.cuStreamSynchronize(nullptr)).c_str());
    } else if (command == "fault") {
      CUdeviceptr nowhere = 0x10;
      uint32_t value = 1;
      uint64_t count = 1024;
      void* fill_params[] = {&nowhere, &value, &count};
      CUresult r = cu.cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, nullptr, fill_params, nullptr);
      if (r == CUDA_SUCCESS) r = cu.cuStreamSynchronize(nullptr);
      std::printf("faulted %s\n", error_name(r).c_str());
    } else if (command == "ctx") {
      CUcontext created = nullptr;
      CUresult r = cu.cuCtxCreate_v4(&created, nullptr, 0, 0);
      std::printf("ctx %s\n", error_name(r).c_str());
    } else if (command == "quit") {
      return 0;
    } else {
      std::printf("unknown %s\n", command.c_str());
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3 && std::string(argv[1]) == "as-uid") {
    const auto uid = static_cast<uid_t>(std::strtoul(argv[2], nullptr, 10));
    if (setgid(uid) != 0 || setuid(uid) != 0) {
      std::printf("error setuid\n");
      return 1;
    }
    argv += 2;
    argc -= 2;
  }
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "serve" && argc == 3)
    return serve(static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)));
  if (mode == "hold" && argc == 3) return hold(std::strtoull(argv[2], nullptr, 10));
  if (mode == "ipc" && argc == 2) return fakecuda_test::ipc_peer();
  if (mode == "spin" && argc == 5) {
    return spin(std::strtol(argv[2], nullptr, 10),
                static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)), std::atoi(argv[4]));
  }
  std::fprintf(stderr,
               "usage: fakecuda-test-child [as-uid <uid>] hold <bytes> | spin <millis> <kernel_us> "
               "<batch> | serve <blocks> | ipc\n");
  return 2;
}
