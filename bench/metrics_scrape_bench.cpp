// What one Prometheus scrape of the broker costs (GET /metrics, tenant_metrics.h and
// metrics_exposition.h), in-process, with N tenants each on one GPU (default 1,000), each
// with a registered process holding memory, behind a real TenantRegistry (files in a
// temporary directory), ComputeService and AuditService:
//  * BM_Scrape          — snapshot + families + serialisation: a whole scrape as the
//                         server does it, with its ExpositionCache kept across scrapes
//                         (nothing changed between two: an idle node);
//  * BM_ScrapeUncached  — the same without the cache: every series through TextSerializer
//                         (what a scrape costs when every value changed);
//  * BM_Snapshot        — the snapshot alone: the part under the broker's state mutex,
//                         i.e. how long a scrape holds up the broker's event loop;
//  * BM_Exposition      — prometheus-cpp's part: the families built from a snapshot and
//                         serialised by TextSerializer (on the metrics thread, no lock);
//  * BM_ExpositionChanging/N/P — with the cache, P % of the tenants' used memory and
//                         compute counters moving between scrapes (a busy node).
// The shim is not involved: its hot paths never touch metrics. Figures in
// docs/monitoring.md ("Cost"). Run:
//   build/bin/fracgpu_metrics_scrape_bench --benchmark_repetitions=5
//   (--benchmark_filter=BM_Scrape/100 for 100 tenants)
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/audit_service.h"
#include "core/compute_service.h"
#include "core/event_loop.h"
#include "core/ledger_ops.h"
#include "core/ledger_reconciler.h"
#include "core/metrics_exposition.h"
#include "core/process_port.h"
#include "core/process_tracker.h"
#include "core/state_store.h"
#include "core/tenant_metrics.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

// A broker's state with `count` tenants on GPU 0, as a restarted broker finds it:
// tenants.json written once and restored (creating 1,000 tenants one by one would
// rewrite tenants.json 1,000 times).
class BrokerState {
 public:
  explicit BrokerState(int count) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "fracgpu-scrape-bench-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    gpus_.gpus.push_back(
        {0, "GPU-01234567-89ab-cdef-0123-456789abcdef", "sim", 141 * kGiB, 500 * kMiB});
    registry_ =
        std::make_unique<TenantRegistry>(RegistryConfig{dir_ / "run", dir_ / "state", 0}, gpus_);
    if (!registry_->prepare()) std::abort();
    std::vector<TenantSpec> specs(count);
    std::vector<const TenantSpec*> list;
    for (int i = 0; i < count; ++i) {
      specs[i].name = "tenant-" + std::to_string(i);
      specs[i].devices = {
          DeviceSpec{0, 8 * kGiB, 100 * kMiB, 100, 0, PriorityClass::kNormal, gpus_.gpus[0].uuid}};
      specs[i].owners = {static_cast<uint32_t>(::getuid())};
      specs[i].pod = {"team-" + std::to_string(i % 20), "job-" + std::to_string(i), "main"};
      list.push_back(&specs[i]);
    }
    if (!StateStore(dir_ / "state").save(list)) std::abort();
    registry_->restore();
    // One registered process per tenant (this one, watched like a real one) holding 64 MiB.
    tracker_ = std::make_unique<ProcessTracker>(loop_, [](const std::string&, uint32_t, pid_t) {});
    const auto self = ProcfsProcessPort().describe(::getpid());
    if (!self) std::abort();
    for (Tenant* t : registry_->all()) {
      const auto slot = ledger::claim_slot(t->ledger(), ::getpid(), self->start_time);
      if (!slot || !ledger::reserve(t->ledger(), t->quota(), *slot, 0, 64 * kMiB) ||
          !tracker_->watch(t->spec.name, *slot, ::getpid(), self->start_time))
        std::abort();
    }
    compute_ = std::make_unique<ComputeService>(loop_, ComputeConfig{});
    compute_->sync(*registry_);  // a doorbell per tenant: needs a raised descriptor limit
    reconciler_ = std::make_unique<LedgerReconciler>(*registry_);
    audit_ = std::make_unique<AuditService>(AuditOptions{"", 0, AuditAction::kLog, 64 * kMiB},
                                            *registry_, *tracker_, *reconciler_, gpus_);
  }
  ~BrokerState() {
    audit_.reset();
    compute_.reset();
    registry_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  MetricsSnapshot snapshot() {
    return take_metrics_snapshot({*registry_, *tracker_, compute_.get(), audit_.get()});
  }

 private:
  std::filesystem::path dir_;
  GpuInventory gpus_;
  EventLoop loop_;
  std::unique_ptr<TenantRegistry> registry_;
  std::unique_ptr<ComputeService> compute_;
  std::unique_ptr<ProcessTracker> tracker_;
  std::unique_ptr<LedgerReconciler> reconciler_;
  std::unique_ptr<AuditService> audit_;
};

BrokerState& state_with(int tenants) {
  static std::unique_ptr<BrokerState> state;
  static int current = -1;
  if (current != tenants) {
    state.reset();
    state = std::make_unique<BrokerState>(tenants);
    current = tenants;
  }
  return *state;
}

void report(benchmark::State& state, const std::string& text) {
  state.counters["tenants"] = static_cast<double>(state.range(0));
  state.counters["bytes"] = static_cast<double>(text.size());
}

void BM_Scrape(benchmark::State& state) {
  BrokerState& broker = state_with(static_cast<int>(state.range(0)));
  ExpositionCache cache;
  std::string text = render_metrics(broker.snapshot(), cache);  // the server's first scrape
  for (auto _ : state) {
    text = render_metrics(broker.snapshot(), cache);
    benchmark::DoNotOptimize(text.data());
  }
  report(state, text);
}

void BM_ScrapeUncached(benchmark::State& state) {
  BrokerState& broker = state_with(static_cast<int>(state.range(0)));
  std::string text;
  for (auto _ : state) {
    text = render_metrics(broker.snapshot());
    benchmark::DoNotOptimize(text.data());
  }
  report(state, text);
}

void BM_ExpositionChanging(benchmark::State& state) {
  MetricsSnapshot snapshot = state_with(static_cast<int>(state.range(0))).snapshot();
  const std::size_t every = state.range(1) > 0 ? static_cast<std::size_t>(100 / state.range(1)) : 0;
  ExpositionCache cache;
  std::string text = render_metrics(snapshot, cache);
  std::size_t round = 0;
  for (auto _ : state) {
    ++round;
    for (std::size_t i = every ? round % every : 0; every && i < snapshot.tenants.size();
         i += every) {
      TenantGpuMetrics& t = snapshot.tenants[i];
      t.memory_used += 4096;
      t.memory_peak = std::max(t.memory_peak, t.memory_used);
      if (t.compute) {
        t.compute->gpu_seconds += 0.01;
        t.compute->wait_seconds += 0.01;
        t.compute->measured_share = 0.5;
      }
    }
    text = render_metrics(snapshot, cache);
    benchmark::DoNotOptimize(text.data());
  }
  report(state, text);
}

void BM_Snapshot(benchmark::State& state) {
  BrokerState& broker = state_with(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    MetricsSnapshot s = broker.snapshot();
    benchmark::DoNotOptimize(s.tenants.data());
  }
  state.counters["tenants"] = static_cast<double>(state.range(0));
}

void BM_Exposition(benchmark::State& state) {
  const MetricsSnapshot snapshot = state_with(static_cast<int>(state.range(0))).snapshot();
  std::string text;
  for (auto _ : state) {
    text = render_metrics(snapshot);
    benchmark::DoNotOptimize(text.data());
  }
  report(state, text);
}

BENCHMARK(BM_Scrape)->Arg(1000)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ScrapeUncached)->Arg(1000)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExpositionChanging)
    ->Args({1000, 10})
    ->Args({1000, 100})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Snapshot)->Arg(1000)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Exposition)->Arg(1000)->Arg(100)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fracgpu::broker

int main(int argc, char** argv) {
  rlimit lim{};  // 1,000 doorbells and mappings, as the broker raises it
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  spdlog::set_level(spdlog::level::warn);  // restore() logs a line per tenant
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
