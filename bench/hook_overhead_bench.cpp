// What the shim adds to a driver call, measured on the simulated GPU: the same entry
// point called directly in the driver and through libfracgpu.so, side by side in one
// process. Both libraries are dlopen'ed by path (the shim finds the driver through
// FRACGPU_REAL_DRIVER), so the only difference between a pair is the shim's path:
//   hooked    — exported trampoline → typed wrapper → driver (cuInit, cuLaunchKernel);
//   forwarded — exported trampoline → driver (cuCtxGetCurrent, cuDriverGetVersion).
// Run: build/bin/fracgpu_hook_overhead_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  template <typename Fn>
  Fn get(const char* name) const {
    void* fn = dlsym(handle, name);
    if (fn == nullptr) {
      std::fprintf(stderr, "missing %s\n", name);
      std::abort();
    }
    return reinterpret_cast<Fn>(fn);
  }
};

struct Setup {
  Library driver, shim;
  std::string shm_name;
  CUfunction empty_kernel_direct = nullptr;
  CUfunction empty_kernel_shim = nullptr;
  CUstream stream_direct = nullptr;

  Setup() {
    shm_name = "/fracgpu-bench-" + std::to_string(getpid());
    setenv("FAKECUDA_SHM_NAME", shm_name.c_str(), 1);
    setenv("FAKECUDA_MEMORY", "4GiB", 1);
    setenv("FRACGPU_REAL_DRIVER", FRACGPU_FAKECUDA_DIR "/libcuda.so.1", 1);
    driver.handle = dlopen(FRACGPU_FAKECUDA_DIR "/libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    shim.handle = dlopen(FRACGPU_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
    if (driver.handle == nullptr || shim.handle == nullptr) {
      std::fprintf(stderr, "cannot load: %s\n", dlerror());
      std::abort();
    }
    check(driver.get<decltype(&cuInit)>("cuInit")(0), "cuInit");
    check(shim.get<decltype(&cuInit)>("cuInit")(0), "cuInit via shim");
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    check(driver.get<decltype(&cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain")(&ctx, dev),
          "retain");
    check(driver.get<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent")(ctx), "set current");
    CUmodule module = nullptr;
    check(driver.get<decltype(&cuModuleLoadData)>("cuModuleLoadData")(&module, "bench"), "module");
    check(driver.get<decltype(&cuModuleGetFunction)>("cuModuleGetFunction")(
              &empty_kernel_direct, module, "fracgpu_fake_empty"),
          "fracgpu_fake_empty");
    empty_kernel_shim = empty_kernel_direct;  // same driver objects behind both paths
  }
  ~Setup() { shm_unlink(shm_name.c_str()); }

  static void check(CUresult rc, const char* what) {
    if (rc != CUDA_SUCCESS) {
      std::fprintf(stderr, "%s failed: %d\n", what, static_cast<int>(rc));
      std::abort();
    }
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

const Library& pick(bool via_shim) {
  return via_shim ? setup().shim : setup().driver;
}

void BM_cuInit_hooked(benchmark::State& state, bool via_shim) {
  auto fn = pick(via_shim).get<decltype(&cuInit)>("cuInit");
  for (auto _ : state) benchmark::DoNotOptimize(fn(0));
}

void BM_cuCtxGetCurrent_forwarded(benchmark::State& state, bool via_shim) {
  auto fn = pick(via_shim).get<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent");
  CUcontext ctx = nullptr;
  for (auto _ : state) benchmark::DoNotOptimize(fn(&ctx));
}

void BM_cuDriverGetVersion_forwarded(benchmark::State& state, bool via_shim) {
  auto fn = pick(via_shim).get<decltype(&cuDriverGetVersion)>("cuDriverGetVersion");
  int version = 0;
  for (auto _ : state) benchmark::DoNotOptimize(fn(&version));
}

// An empty kernel on the simulated GPU: the enqueue cost plus the shim's launch path.
void BM_cuLaunchKernel_hooked(benchmark::State& state, bool via_shim) {
  auto launch = pick(via_shim).get<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  auto sync = setup().driver.get<decltype(&cuCtxSynchronize)>("cuCtxSynchronize");
  CUfunction f = via_shim ? setup().empty_kernel_shim : setup().empty_kernel_direct;
  int64_t launched = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
    if (++launched % 1024 == 0) {
      state.PauseTiming();
      sync();
      state.ResumeTiming();
    }
  }
  sync();
}

}  // namespace

BENCHMARK_CAPTURE(BM_cuInit_hooked, direct, false);
BENCHMARK_CAPTURE(BM_cuInit_hooked, shim, true);
BENCHMARK_CAPTURE(BM_cuCtxGetCurrent_forwarded, direct, false);
BENCHMARK_CAPTURE(BM_cuCtxGetCurrent_forwarded, shim, true);
BENCHMARK_CAPTURE(BM_cuDriverGetVersion_forwarded, direct, false);
BENCHMARK_CAPTURE(BM_cuDriverGetVersion_forwarded, shim, true);
BENCHMARK_CAPTURE(BM_cuLaunchKernel_hooked, direct, false);
BENCHMARK_CAPTURE(BM_cuLaunchKernel_hooked, shim, true);

BENCHMARK_MAIN();
