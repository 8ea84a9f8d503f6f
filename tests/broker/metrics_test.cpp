// The Prometheus endpoint's content (broker/core/tenant_metrics.h, metrics_exposition.h,
// metrics_server.h) for a real TenantRegistry with two tenants on one GPU, its
// ComputeService and AuditService, in-process: every series of the metrics contract
// (docs/monitoring.md) with its type and labels, values equal to the quota and ledger
// counters, a deleted tenant's series gone, label values escaped, the text accepted by
// `promtool check metrics`, and GET /metrics over HTTP.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/audit_service.h"
#include "core/compute_service.h"
#include "core/event_loop.h"
#include "core/ledger_ops.h"
#include "core/ledger_reconciler.h"
#include "core/metrics_exposition.h"
#include "core/metrics_server.h"
#include "core/process_port.h"
#include "core/process_tracker.h"
#include "core/tenant_metrics.h"
#include "core/tenant_registry.h"
#include "exposition_reader.h"
#include "temp_dir.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;
using testing::Exposition;
using testing::kGiB;
using testing::kMiB;
using testing::Labels;
using testing::MemoryTenant;

constexpr const char* kUuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";

const std::set<std::string> kTenantLabels = {"tenant",    "gpu", "gpu_uuid",
                                             "namespace", "pod", "container"};
const std::set<std::string> kGpuLabels = {"gpu", "gpu_uuid"};

// The contract's per-tenant and per-GPU families and their types.
const std::map<std::string, std::string> kTenantFamilies = {
    {"fracgpu_memory_limit_bytes", "gauge"},
    {"fracgpu_memory_request_bytes", "gauge"},
    {"fracgpu_memory_grant_bytes", "gauge"},
    {"fracgpu_memory_used_bytes", "gauge"},
    {"fracgpu_memory_peak_bytes", "gauge"},
    {"fracgpu_memory_swapped_bytes", "gauge"},
    {"fracgpu_memory_host_reserved_bytes", "gauge"},
    {"fracgpu_memory_allocation_refusals_total", "counter"},
    {"fracgpu_memory_burst_requests_total", "counter"},
    {"fracgpu_compute_held_seconds_total", "counter"},
    {"fracgpu_compute_wait_seconds_total", "counter"},
    {"fracgpu_compute_weight", "gauge"},
    {"fracgpu_compute_ceiling_ratio", "gauge"},
    {"fracgpu_compute_priority", "gauge"},
    {"fracgpu_compute_share_ratio", "gauge"},
    {"fracgpu_tenant_processes", "gauge"},
};
const std::map<std::string, std::string> kGpuFamilies = {
    {"fracgpu_gpu_memory_total_bytes", "gauge"},
    {"fracgpu_gpu_memory_used_bytes", "gauge"},
    {"fracgpu_gpu_tenants", "gauge"},
    {"fracgpu_gpu_handoffs_total", "counter"},
    {"fracgpu_gpu_grant_wait_seconds", "histogram"},
};

using testing::TempDir;

GpuInventory one_gpu() {
  GpuInventory inv;
  inv.gpus.push_back({0, kUuid, "sim", 16 * kGiB, 300 * kMiB});
  return inv;
}

class Metrics : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry.prepare().ok());
    add(R"({"name":"alpha","devices":[{"gpu":0,"memory_limit":4294967296,
            "memory_request":1073741824,"compute":70,"priority":"high"}]})");
    add(R"({"name":"beta","devices":[{"gpu":0,"memory_limit":2147483648,
            "memory_request":536870912,"compute":30,"compute_limit":50,"priority":"low"}]})");
    registry.find("alpha")->spec.pod = {"team-a", "infer-7f9c", "server"};
    audit.open();  // interval 0: books check only, no NVML
    compute.sync(registry);
  }
  void add(const char* tenant) {
    auto t = registry.create(json::parse(tenant));
    ASSERT_TRUE(t.ok()) << t.error();
  }
  MetricsSnapshot snapshot() {
    return take_metrics_snapshot({registry, tracker, &compute, &audit});
  }
  std::string text() { return render_metrics(snapshot()); }
  Exposition scrape() { return Exposition::parse(text()); }
  // What a process of `tenant` does: register (this test process, watched by the broker's
  // tracker like a real one) and allocate.
  void allocate(const std::string& tenant, uint64_t bytes) {
    Tenant* t = registry.find(tenant);
    const auto self = ProcfsProcessPort().describe(::getpid());
    ASSERT_TRUE(self.has_value());
    const auto slot = ledger::claim_slot(t->ledger(), ::getpid(), self->start_time);
    ASSERT_TRUE(slot.has_value());
    ASSERT_TRUE(tracker.watch(tenant, *slot, ::getpid(), self->start_time));
    ASSERT_TRUE(ledger::reserve(t->ledger(), t->quota(), *slot, 0, bytes));
  }

  TempDir dir;
  GpuInventory gpus = one_gpu();
  TenantRegistry registry{RegistryConfig{dir.path() / "run", dir.path() / "state", 0}, gpus};
  EventLoop loop;
  ComputeService compute{loop, ComputeConfig{}};
  ProcessTracker tracker{loop, [](const std::string&, uint32_t, pid_t) {}};
  LedgerReconciler reconciler{registry};
  AuditService audit{AuditOptions{"", 0, AuditAction::kLog, 64 * kMiB}, registry, tracker,
                     reconciler, gpus};
};

TEST_F(Metrics, EveryContractSeriesIsThereWithItsTypeAndLabels) {
  const Exposition e = scrape();
  for (const auto& [name, type] : kTenantFamilies) {
    EXPECT_EQ(e.type(name), type) << name;
    const auto samples = e.samples(name);
    ASSERT_EQ(samples.size(), 2u) << name << ": one per tenant and GPU";
    for (const auto* s : samples) {
      EXPECT_EQ(testing::keys(s->labels), kTenantLabels) << name;
      EXPECT_EQ(s->labels.at("gpu"), "0");
      EXPECT_EQ(s->labels.at("gpu_uuid"), kUuid);
    }
  }
  EXPECT_EQ(e.type("fracgpu_audit_violations_total"), "counter");
  auto with_kind = kTenantLabels;
  with_kind.insert("kind");
  const auto violations = e.samples("fracgpu_audit_violations_total");
  EXPECT_EQ(violations.size(), 2 * kViolationKinds) << "every tenant, GPU and kind, from 0";
  for (const auto* s : violations) EXPECT_EQ(testing::keys(s->labels), with_kind);

  for (const auto& [name, type] : kGpuFamilies) EXPECT_EQ(e.type(name), type) << name;
  for (const char* name :
       {"fracgpu_gpu_memory_total_bytes", "fracgpu_gpu_memory_used_bytes", "fracgpu_gpu_tenants",
        "fracgpu_gpu_handoffs_total", "fracgpu_gpu_grant_wait_seconds_sum",
        "fracgpu_gpu_grant_wait_seconds_count"}) {
    const auto samples = e.samples(name);
    ASSERT_EQ(samples.size(), 1u) << name;
    EXPECT_EQ(samples[0]->labels, (Labels{{"gpu", "0"}, {"gpu_uuid", kUuid}})) << name;
  }
  const auto buckets = e.samples("fracgpu_gpu_grant_wait_seconds_bucket");
  ASSERT_EQ(buckets.size(), GrantWaitHistogram::kBoundsNs.size() + 1);
  std::set<std::string> bounds;
  for (const auto* b : buckets) bounds.insert(b->labels.at("le"));
  for (const char* le : {"0.0001", "0.001", "0.01", "0.1", "1", "2.5", "+Inf"})
    EXPECT_EQ(bounds.count(le), 1u) << le;
  EXPECT_TRUE(e.samples("fracgpu_gpu_utilization_ratio").empty()) << "NVML only";

  EXPECT_EQ(e.type("fracgpu_build_info"), "gauge");
  EXPECT_EQ(e.value("fracgpu_build_info", {{"version", fracgpu_version()}}), 1);
  EXPECT_EQ(e.value("fracgpu_broker_up", {}), 1);
}

TEST_F(Metrics, ValuesAreTheQuotaAndLedgerCounters) {
  allocate("alpha", 700 * kMiB);
  Tenant* alpha = registry.find("alpha");
  alpha->ledger().devices[0].oom_events = 3;
  // A slot the tenant forged in its ledger (no registration): not a process of the metrics.
  Tenant* beta = registry.find("beta");
  const auto forged = ledger::claim_slot(beta->ledger(), 99999, 1);
  ASSERT_TRUE(forged && ledger::reserve(beta->ledger(), beta->quota(), *forged, 0, kMiB));
  alpha->ledger().devices[0].burst_requests = 5;
  const Exposition e = scrape();
  const Labels a = {{"tenant", "alpha"}};
  const DeviceQuota& q = alpha->quota().devices[0];
  const DeviceUsage& u = alpha->ledger().devices[0];
  EXPECT_EQ(e.value("fracgpu_memory_limit_bytes", a), q.memory_limit.load());
  EXPECT_EQ(e.value("fracgpu_memory_limit_bytes", a), 4 * kGiB);
  EXPECT_EQ(e.value("fracgpu_memory_request_bytes", a), q.memory_request.load());
  EXPECT_EQ(e.value("fracgpu_memory_grant_bytes", a), q.memory_grant.load());
  EXPECT_EQ(e.value("fracgpu_memory_used_bytes", a), 700 * kMiB);
  EXPECT_EQ(e.value("fracgpu_memory_used_bytes", a), u.used.load());
  EXPECT_EQ(e.value("fracgpu_memory_peak_bytes", a), u.peak.load());
  EXPECT_EQ(e.value("fracgpu_memory_swapped_bytes", a), 0);
  EXPECT_EQ(e.value("fracgpu_memory_host_reserved_bytes", a), 0);
  EXPECT_EQ(e.value("fracgpu_memory_allocation_refusals_total", a), 3);
  EXPECT_EQ(e.value("fracgpu_memory_burst_requests_total", a), 5);
  EXPECT_EQ(e.value("fracgpu_tenant_processes", a), 1);
  EXPECT_EQ(e.value("fracgpu_tenant_processes", {{"tenant", "beta"}}), 0);
  EXPECT_EQ(e.value("fracgpu_compute_weight", a), 70);
  EXPECT_EQ(e.value("fracgpu_compute_priority", a), 2);
  EXPECT_EQ(e.value("fracgpu_compute_ceiling_ratio", a), 0);
  EXPECT_EQ(e.value("fracgpu_compute_weight", {{"tenant", "beta"}}), 30);
  EXPECT_EQ(e.value("fracgpu_compute_priority", {{"tenant", "beta"}}), 0);
  EXPECT_DOUBLE_EQ(e.value("fracgpu_compute_ceiling_ratio", {{"tenant", "beta"}}), 0.5);
  // No process launched: nothing held, nothing waited, no handoff.
  EXPECT_EQ(e.value("fracgpu_compute_held_seconds_total", {{"tenant", "beta"}}), 0);
  EXPECT_EQ(e.value("fracgpu_compute_wait_seconds_total", {{"tenant", "beta"}}), 0);
  EXPECT_EQ(e.value("fracgpu_gpu_handoffs_total", {}), 0);
  EXPECT_EQ(e.value("fracgpu_gpu_grant_wait_seconds_count", {}),
            compute.gpu_counters(0)->grant_waits.count());
  // The GPU: without NVML its used memory is the tenants' books.
  EXPECT_EQ(e.value("fracgpu_gpu_memory_total_bytes", {}), 16 * kGiB);
  EXPECT_EQ(e.value("fracgpu_gpu_memory_used_bytes", {}), 701 * kMiB);
  EXPECT_EQ(e.value("fracgpu_gpu_tenants", {}), 2);
  // The pod labels come from the tenant's spec.
  const auto* s = e.find("fracgpu_memory_used_bytes", a);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->labels.at("namespace"), "team-a");
  EXPECT_EQ(s->labels.at("pod"), "infer-7f9c");
  EXPECT_EQ(s->labels.at("container"), "server");
  EXPECT_EQ(e.find("fracgpu_memory_used_bytes", {{"tenant", "beta"}})->labels.at("pod"), "");
}

TEST_F(Metrics, ViolationsAreTheAuditsCounts) {
  registry.find("beta")->quota().devices[0].memory_limit = 64 * kGiB;  // a tampered cap
  audit.books_tick();
  const uint64_t found = audit.log().count("beta", 0, ViolationKind::kQuota);
  ASSERT_EQ(found, 1u) << "the books check repairs and reports the cap";
  const Exposition e = scrape();
  EXPECT_EQ(e.value("fracgpu_audit_violations_total", {{"tenant", "beta"}, {"kind", "quota"}}),
            found);
  EXPECT_EQ(e.value("fracgpu_audit_violations_total", {{"tenant", "alpha"}, {"kind", "quota"}}), 0);
  EXPECT_EQ(e.value("fracgpu_memory_limit_bytes", {{"tenant", "beta"}}), 2 * kGiB)
      << "the repaired cap";
  EXPECT_EQ(e.value("fracgpu_audit_passes_total", {{"part", "books"}}), 1);
}

TEST_F(Metrics, AViolationOnAGpuTheTenantWasNotGivenHasItsOwnSeries) {
  ViolationLog& log = const_cast<ViolationLog&>(audit.log());  // what audit_tick records
  Violation v;
  v.tenant = "alpha";
  v.gpu = 1;
  v.gpu_uuid = "GPU-other";
  v.kind = ViolationKind::kUnregistered;
  log.record(v);
  const Exposition e = scrape();
  const auto* s = e.find("fracgpu_audit_violations_total", {{"tenant", "alpha"}, {"gpu", "1"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, 1);
  EXPECT_EQ(s->labels.at("gpu_uuid"), "GPU-other");
  EXPECT_EQ(s->labels.at("pod"), "infer-7f9c");
  EXPECT_EQ(s->labels.at("kind"), "unregistered");
  EXPECT_EQ(e.samples("fracgpu_audit_violations_total").size(), 2 * kViolationKinds + 1);
}

TEST_F(Metrics, ADeletedTenantsSeriesAreGone) {
  ASSERT_TRUE(registry.remove("beta").ok());
  audit.forget("beta");
  compute.sync(registry);
  const Exposition e = scrape();
  for (const auto& sample : e.all())
    EXPECT_NE(sample.labels.count("tenant") ? sample.labels.at("tenant") : "", "beta")
        << sample.name;
  for (const auto& [name, type] : kTenantFamilies)
    EXPECT_EQ(e.samples(name).size(), 1u) << name << ": alpha's";
  EXPECT_EQ(e.value("fracgpu_gpu_tenants", {}), 1);
}

TEST_F(Metrics, LabelValuesAreEscaped) {
  const std::string nasty = "we\"ird\\pod\nname";
  registry.find("beta")->spec.pod = {"ns\\x", nasty, "c\"1"};
  const std::string out = text();
  EXPECT_NE(out.find(R"(pod="we\"ird\\pod\nname")"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(namespace="ns\\x")"), std::string::npos);
  EXPECT_NE(out.find(R"(container="c\"1")"), std::string::npos);
  // Every sample stays on one line and reads back as the original value.
  const Exposition e = Exposition::parse(out);
  const auto* s = e.find("fracgpu_memory_limit_bytes", {{"tenant", "beta"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->labels.at("pod"), nasty);
  EXPECT_EQ(s->labels.at("namespace"), "ns\\x");
}

// The swap reserve its registered processes hold (tenant_segment.h minor 6); a slot the
// tenant forged (no registration) is not counted.
TEST_F(Metrics, HostReservedIsWhatItsRegisteredProcessesHold) {
  allocate("alpha", 700 * kMiB);
  Tenant* alpha = registry.find("alpha");
  const auto self = ProcfsProcessPort().describe(::getpid());
  ASSERT_TRUE(self.has_value());
  const auto slot = ledger::find_live_slot(alpha->ledger(), ::getpid(), self->start_time);
  ASSERT_TRUE(slot.has_value());
  alpha->quota().devices[0].host_reserve = 512 * kMiB;
  alpha->ledger().host_reserved[*slot] = 384 * kMiB;
  Tenant* beta = registry.find("beta");
  const auto forged = ledger::claim_slot(beta->ledger(), 99999, 1);
  ASSERT_TRUE(forged.has_value());
  beta->ledger().host_reserved[*forged] = kGiB;
  const Exposition e = scrape();
  EXPECT_EQ(e.value("fracgpu_memory_host_reserved_bytes", {{"tenant", "alpha"}}), 384 * kMiB);
  EXPECT_EQ(e.value("fracgpu_memory_host_reserved_bytes", {{"tenant", "beta"}}), 0);
}

// A process holds its reserve for all its GPUs together: each GPU's series shows it up to
// that GPU's reserve, in the quota's order, and what is held beyond the reserves (trimmed at
// the processes' next look) on the first; the tenant's sum is exact.
TEST(MetricsHostReserved, TheHeldReserveIsSplitOverTheTenantsGpus) {
  MemoryTenant t{"t", 0, 16 * kGiB, 0};
  t.quota->device_count = 2;
  t.quota->devices[0].host_reserve = 1 * kGiB;
  t.quota->devices[1].host_reserve = 2 * kGiB;
  const auto other = ledger::claim_slot(*t.ledger, 1001, 1);
  ASSERT_TRUE(other.has_value());
  const std::vector<ProcessTracker::Watched> both = {{t.slot, 1000, 1}, {*other, 1001, 1}};
  t.ledger->host_reserved[t.slot] = 2 * kGiB;
  t.ledger->host_reserved[*other] = kGiB / 2;
  EXPECT_EQ(host_reserved_bytes_by_gpu(*t.quota, *t.ledger, both, 2),
            (std::vector<uint64_t>{1 * kGiB, 1 * kGiB + kGiB / 2}));
  t.ledger->host_reserved[t.slot] = 3 * kGiB + kGiB / 2;
  EXPECT_EQ(host_reserved_bytes_by_gpu(*t.quota, *t.ledger, both, 2),
            (std::vector<uint64_t>{2 * kGiB, 2 * kGiB}))
      << "1 GiB beyond the reserves";
  t.ledger->size = static_cast<uint32_t>(kLedgerMinSize);  // the older layout: no reserve
  EXPECT_EQ(host_reserved_bytes_by_gpu(*t.quota, *t.ledger, both, 2),
            (std::vector<uint64_t>{0, 0}));
}

TEST(MetricsExposition, HandMadeSnapshotRoundTrips) {
  MetricsSnapshot s;
  s.version = "9.9.9";
  TenantGpuMetrics t;
  t.labels = {"t", 3, "GPU-x", {}};
  t.compute = ComputeStatus{"waiting", 0.25, 12.5, 3.75};
  s.tenants.push_back(t);
  GpuMetrics g;
  g.index = 3;
  g.uuid = "GPU-x";
  g.utilization = 0.625;
  g.compute.handoffs = 42;
  g.compute.grant_waits.observe(50'000);
  g.compute.grant_waits.observe(20'000'000);
  g.compute.grant_waits.observe(20'000'000);
  s.gpus.push_back(g);
  const Exposition e = Exposition::parse(render_metrics(s));
  EXPECT_EQ(e.value("fracgpu_compute_held_seconds_total", {{"tenant", "t"}}), 12.5);
  EXPECT_EQ(e.value("fracgpu_compute_wait_seconds_total", {{"tenant", "t"}}), 3.75);
  EXPECT_EQ(e.value("fracgpu_compute_share_ratio", {{"tenant", "t"}}), 0.25);
  EXPECT_EQ(e.value("fracgpu_gpu_utilization_ratio", {{"gpu", "3"}}), 0.625);
  EXPECT_EQ(e.value("fracgpu_gpu_handoffs_total", {{"gpu", "3"}}), 42);
  EXPECT_EQ(e.value("fracgpu_gpu_grant_wait_seconds_bucket", {{"le", "0.0001"}}), 1);
  EXPECT_EQ(e.value("fracgpu_gpu_grant_wait_seconds_bucket", {{"le", "0.01"}}), 1);
  EXPECT_EQ(e.value("fracgpu_gpu_grant_wait_seconds_bucket", {{"le", "0.025"}}), 3);
  EXPECT_EQ(e.value("fracgpu_gpu_grant_wait_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_EQ(e.value("fracgpu_gpu_grant_wait_seconds_count", {}), 3);
  EXPECT_DOUBLE_EQ(e.value("fracgpu_gpu_grant_wait_seconds_sum", {}), 0.04005);
  EXPECT_EQ(e.value("fracgpu_build_info", {{"version", "9.9.9"}}), 1);
  EXPECT_TRUE(e.samples("fracgpu_audit_violations_total").empty()) << "no audit, no series";
}

// The server's cache (ExpositionCache) must never change a byte: its text is
// TextSerializer's for the same families, whatever changed between two scrapes.
TEST(MetricsExposition, TheCachedExpositionIsTextSerializersExactly) {
  MetricsSnapshot s;
  s.version = "9.9.9";
  for (int i = 0; i < 6; ++i) {
    TenantGpuMetrics t;
    t.labels = {"t" + std::to_string(i), static_cast<uint32_t>(i % 2), "GPU-x", {"ns", "p", "c"}};
    t.memory_limit = kGiB;
    t.memory_used = 64 * kMiB * static_cast<uint64_t>(i);
    if (i % 2 == 0) t.compute = ComputeStatus{"idle", 0.0, 1.5, 0.5};
    s.tenants.push_back(t);
  }
  s.violations.push_back({1, 1, "GPU-x", ViolationKind::kLedger, 2});
  GpuMetrics g;
  g.uuid = "GPU-x";
  g.compute.grant_waits.observe(50'000);
  s.gpus.push_back(g);
  ExpositionCache cache;
  EXPECT_EQ(render_metrics(s, cache), render_metrics(s)) << "first scrape";
  EXPECT_EQ(render_metrics(s, cache), render_metrics(s)) << "nothing changed";
  EXPECT_GT(cache.reused(), 0u);
  s.tenants[2].memory_used += 4096;
  s.tenants[4].compute->gpu_seconds += 1;
  s.tenants[3].labels.pod.pod = "q\"uoted";
  s.gpus[0].compute.grant_waits.observe(20'000'000);
  EXPECT_EQ(render_metrics(s, cache), render_metrics(s)) << "values and a label changed";
  s.tenants.erase(s.tenants.begin() + 1);  // its violation goes with it
  s.violations.clear();
  EXPECT_EQ(render_metrics(s, cache), render_metrics(s)) << "a tenant deleted";
  const std::string text = render_metrics(s, cache);
  EXPECT_EQ(text.find("t1\""), std::string::npos) << "the deleted tenant's series are gone";
  EXPECT_EQ(text.find("fracgpu_audit_violations_total"), std::string::npos);
}

// promtool is Debian's "prometheus" package; its lint is what Prometheus users run.
TEST_F(Metrics, PromtoolAcceptsTheExposition) {
  const std::string promtool = FRACGPU_PROMTOOL;  // found by CMake, else the bare name
  if (promtool.find('/') == std::string::npos || ::access(promtool.c_str(), X_OK) != 0)
    GTEST_SKIP() << "promtool not found when configuring (Debian package 'prometheus'): "
                    "the lint of the exposition is not run";
  allocate("alpha", 100 * kMiB);
  registry.find("beta")->spec.pod = {"ns", "we\"ird\\pod\nname", "c"};
  const std::filesystem::path file = dir.path() / "metrics.txt";
  std::ofstream(file) << text();
  const std::string command = promtool + " check metrics < " + file.string() + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string complaints;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) complaints += buffer;
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << complaints;
  EXPECT_EQ(complaints, "") << "promtool check metrics complained";
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buffer[65536];
    for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) reply.append(buffer, n);
  }
  ::close(fd);
  return reply;
}

TEST_F(Metrics, TheServerAnswersAScrapeWithTheExposition) {
  std::mutex state_mutex;
  MetricsServer server(state_mutex, [this] { return snapshot(); });
  const int port = free_port();
  ASSERT_NE(port, 0);
  ASSERT_TRUE(server.start({"127.0.0.1", port}).ok());
  const std::string reply = http_get(port, "/metrics");
  server.stop();
  EXPECT_NE(reply.find("200 OK"), std::string::npos) << reply.substr(0, 200);
  EXPECT_NE(reply.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  const auto body = reply.find("\r\n\r\n");
  ASSERT_NE(body, std::string::npos);
  const Exposition e = Exposition::parse(reply.substr(body + 4));
  EXPECT_EQ(e.value("fracgpu_memory_limit_bytes", {{"tenant", "alpha"}}), 4 * kGiB);
  EXPECT_EQ(e.value("fracgpu_broker_up", {}), 1);
}

}  // namespace
}  // namespace fracgpu::broker
