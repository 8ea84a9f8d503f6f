// What compute scheduling adds to a kernel launch, on the simulated GPU:
//  * BM_GateFastPath — the per-launch work of a granted tenant on its own: the grant
//    word check (GrantGate::unchanged) and the in-flight limiter's count
//    (InflightLimiter::after_launch, fencing every 4096th launch through stub driver
//    calls), in process memory;
//  * BM_EmptyLaunch/direct and /shim_tenant — an empty-kernel launch straight into the
//    simulated driver and through the shim as the only, granted tenant of a private
//    fracgpu-broker (the difference is the shim's whole launch path: wrapper, device
//    lookup, gate, limiter). hook_overhead_bench measures the same launch through the
//    shim without a tenant.
// Figures in docs/benchmarks.md. Run: build/bin/fracgpu_launch_gate_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench_tenant_broker.h"
#include "core/grant_gate.h"
#include "core/inflight_limiter.h"

namespace {

// Stub driver calls for the limiter: every fence completes at once, 1 us apart.
CUresult stub_ctx(CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(0x1);
  return CUDA_SUCCESS;
}
CUresult stub_create(CUevent* e, unsigned) {
  static uintptr_t next = 0x100;
  *e = reinterpret_cast<CUevent>(next++);
  return CUDA_SUCCESS;
}
CUresult stub_record(CUevent, CUstream) {
  return CUDA_SUCCESS;
}
CUresult stub_query(CUevent) {
  return CUDA_SUCCESS;
}
CUresult stub_sync(CUevent) {
  return CUDA_SUCCESS;
}
CUresult stub_elapsed(float* ms, CUevent, CUevent) {
  *ms = 0.001f;
  return CUDA_SUCCESS;
}
CUresult stub_destroy(CUevent) {
  return CUDA_SUCCESS;
}
CUresult stub_capturing(CUstream, CUstreamCaptureStatus* s) {
  *s = CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

void BM_GateFastPath(benchmark::State& state) {
  auto quota = std::make_unique<fracgpu::TenantQuota>();
  auto ledger = std::make_unique<fracgpu::TenantLedger>();
  quota->devices[0].grant_word.store(fracgpu::make_grant_word(7, true, false));
  fracgpu::Doorbell doorbell;
  fracgpu::GrantGate gate;
  gate.bind(&quota->devices[0], &ledger->devices[0], &ledger->schedule[0][0], &doorbell);
  bool new_epoch = false;
  gate.pass_slow(nullptr, nullptr, &new_epoch);  // acknowledge the grant once
  static const fracgpu::FenceOps ops = [] {
    fracgpu::FenceOps o;
    o.ctx_get_current = stub_ctx;
    o.event_create = stub_create;
    o.event_record = stub_record;
    o.event_query = stub_query;
    o.event_synchronize = stub_sync;
    o.event_elapsed = stub_elapsed;
    o.event_destroy = stub_destroy;
    o.stream_is_capturing = stub_capturing;
    return o;
  }();
  fracgpu::InflightLimiter limiter;
  limiter.init(&ops, nullptr);
  for (auto _ : state) {
    if (!gate.unchanged()) gate.pass_slow(nullptr, nullptr, &new_epoch);
    limiter.after_launch(nullptr, gate.inflight_limit_us());
  }
  benchmark::DoNotOptimize(limiter.launches());
}

// The simulated GPU, a tenant on it and the simulated empty kernel.
struct Setup {
  fracgpu::bench::ShimInTenant tenant{"launch-bench", "8GiB", "4GiB"};
  void* driver = tenant.driver;
  void* shim = tenant.shim;
  CUfunction empty = nullptr;

  Setup() {
    using fracgpu::bench::ShimInTenant;
    auto load = ShimInTenant::function<decltype(&cuModuleLoadData)>(driver, "cuModuleLoadData");
    auto get =
        ShimInTenant::function<decltype(&cuModuleGetFunction)>(driver, "cuModuleGetFunction");
    CUmodule module = nullptr;
    if (load(&module, "bench") != CUDA_SUCCESS ||
        get(&empty, module, "fracgpu_fake_empty") != CUDA_SUCCESS)
      fracgpu::bench::fail("cannot load the simulated empty kernel");
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

void BM_EmptyLaunch(benchmark::State& state, bool via_shim) {
  void* lib = via_shim ? setup().shim : setup().driver;
  auto launch = reinterpret_cast<decltype(&cuLaunchKernel)>(dlsym(lib, "cuLaunchKernel"));
  auto sync =
      reinterpret_cast<decltype(&cuCtxSynchronize)>(dlsym(setup().driver, "cuCtxSynchronize"));
  int64_t n = 0;
  for (auto _ : state) {
    if (launch(setup().empty, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS)
      state.SkipWithError("launch failed");
    if (++n % 1024 == 0) {  // keep the simulated queue short, as a real one is bounded
      state.PauseTiming();
      sync();
      state.ResumeTiming();
    }
  }
  sync();
}

}  // namespace

BENCHMARK(BM_GateFastPath);
BENCHMARK_CAPTURE(BM_EmptyLaunch, direct, false);
BENCHMARK_CAPTURE(BM_EmptyLaunch, shim_tenant, true);

BENCHMARK_MAIN();
