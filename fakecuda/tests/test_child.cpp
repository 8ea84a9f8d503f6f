// fakecuda-test-child: a second (third…) GPU client for the multi-process tests. It
// dlopens the fake driver like any CUDA application and talks to the test over
// stdin/stdout:
//   hold <bytes>                    allocate, print "ready", then wait to be killed
//   spin <millis> <kernel_us> <batch>
//                                   print "ready", wait for "go", then for <millis>
//                                   launch <batch> spin kernels of <kernel_us> and
//                                   synchronise, repeatedly; print "done <kernels>"
// Any failure prints "error <what> <CUresult name>" and exits 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "driver_api.h"

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

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "hold" && argc == 3) return hold(std::strtoull(argv[2], nullptr, 10));
  if (mode == "spin" && argc == 5) {
    return spin(std::strtol(argv[2], nullptr, 10),
                static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)), std::atoi(argv[4]));
  }
  std::fprintf(stderr,
               "usage: fakecuda-test-child hold <bytes> | spin <millis> <kernel_us> <batch>\n");
  return 2;
}
