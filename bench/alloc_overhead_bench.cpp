// The memory quota's cost on the allocation path, on the simulated GPU: a
// cuMemAlloc + cuMemFree pair of 1 MiB called directly in the driver and through the
// shim as a member of a tenant (a private fracgpu-broker is started for the run), plus
// the ledger's reserve/release pair on its own. Figures in docs/benchmarks.md.
// Run: build/bin/fracgpu_alloc_overhead_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench_tenant_broker.h"
#include "core/memory_ledger.h"

namespace {

// The simulated GPU and a tenant with an 8 GiB cap on it.
struct Setup {
  fracgpu::bench::ShimInTenant tenant{"alloc-bench", "16GiB", "8GiB"};
  void* driver = tenant.driver;
  void* shim = tenant.shim;
};

Setup& setup() {
  static Setup s;
  return s;
}

void BM_AllocFreePair(benchmark::State& state, bool via_shim) {
  void* lib = via_shim ? setup().shim : setup().driver;
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(dlsym(lib, "cuMemAlloc_v2"));
  auto free_fn = reinterpret_cast<decltype(&cuMemFree_v2)>(dlsym(lib, "cuMemFree_v2"));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (alloc(&p, 1 << 20) != CUDA_SUCCESS || free_fn(p) != CUDA_SUCCESS)
      state.SkipWithError("alloc failed");
  }
}

// The ledger alone: one reserve + release of the fast path, in process memory.
void BM_LedgerReserveRelease(benchmark::State& state) {
  auto quota = std::make_unique<fracgpu::TenantQuota>();
  auto ledger = std::make_unique<fracgpu::TenantLedger>();
  quota->device_count = 1;
  quota->devices[0].memory_limit = 1ull << 40;
  quota->devices[0].memory_grant = 1ull << 40;
  fracgpu::MemoryLedger book(quota.get(), ledger.get(), 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(book.try_reserve(0, 1 << 20));
    book.release(0, 1 << 20);
  }
}

}  // namespace

BENCHMARK_CAPTURE(BM_AllocFreePair, direct, false);
BENCHMARK_CAPTURE(BM_AllocFreePair, shim_tenant, true);
BENCHMARK(BM_LedgerReserveRelease);

BENCHMARK_MAIN();
