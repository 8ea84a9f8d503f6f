// UsageAudit with fake samples and a fake process table: over_cap, unregistered by
// ancestry and by cgroup, nothing for processes attributed to no tenant, episodes counted
// once, the kill action through the port (and never for a recycled pid), books.
#include "core/usage_audit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace fracgpu::broker {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr int32_t kBroker = 50;

class FakeProcesses : public ProcessPort {
 public:
  std::optional<ProcessFacts> describe(int32_t pid) override {
    ++describes;
    auto it = table.find(pid);
    if (it == table.end()) return std::nullopt;
    return it->second;
  }
  // The real port pins the process with a pidfd and signals only the one started at
  // `start_time` (common/pidfd_signal.h, tested in pidfd_signal_test.cpp); this one
  // records what it was asked.
  bool kill(int32_t pid, uint64_t start_time) override {
    auto it = table.find(pid);
    if (it == table.end() || it->second.start_time != start_time) return false;
    killed.push_back(pid);
    killed_starts.push_back(start_time);
    table.erase(it);
    return true;
  }
  void add(int32_t pid, int32_t ppid, std::string cgroup = "0::/user.slice/session-1.scope") {
    table[pid] = ProcessFacts{1000 + static_cast<uint64_t>(pid), ppid, std::move(cgroup)};
  }
  uint64_t start(int32_t pid) const { return table.at(pid).start_time; }

  std::map<int32_t, ProcessFacts> table;
  std::vector<int32_t> killed;
  std::vector<uint64_t> killed_starts;
  int describes = 0;
};

class UsageAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    processes.add(1, 0);
    processes.add(kBroker, 1, "0::/system.slice/fracgpu-broker.service");
  }

  UsageAudit make(AuditAction action = AuditAction::kLog) {
    return UsageAudit(AuditConfig{action, kBroker, 64 * kMiB, 2}, processes);
  }

  // A tenant with a limit on GPU 0 and registered processes (pid, booked on GPU 0).
  AuditTenant tenant(const std::string& name, uint64_t limit,
                     std::vector<std::pair<int32_t, uint64_t>> registered) {
    AuditTenant t{name, {limit}, {64 * kMiB}, {}};
    for (auto [pid, booked] : registered) {
      if (processes.table.count(pid) == 0) processes.add(pid, 1);
      t.processes.push_back({pid, processes.start(pid), {booked}});
    }
    return t;
  }

  static AuditSample sample(std::vector<std::pair<int32_t, uint64_t>> usage, bool ok = true) {
    AuditSample s{0, ok, {}};
    for (auto [pid, bytes] : usage) s.processes.push_back({pid, bytes, true});
    return s;
  }

  static std::vector<ViolationKind> kinds(const std::vector<Violation>& found) {
    std::vector<ViolationKind> k;
    for (const Violation& v : found) k.push_back(v.kind);
    std::sort(k.begin(), k.end());
    return k;
  }

  const std::vector<AuditGpu> gpus{{0, "GPU-66726163-6770-7566-616b-656770750000"}};
  FakeProcesses processes;
};

TEST_F(UsageAuditTest, WithinTheBooksNothingIsReported) {
  UsageAudit audit = make();
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 576 * kMiB}})};
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, 576 * kMiB}})}).empty());
  EXPECT_EQ(audit.open_episodes(), 0u);
}

TEST_F(UsageAuditTest, OverCapIsReportedOnceAndAgainOnlyAfterItWentBackUnder) {
  UsageAudit audit = make();
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 512 * kMiB}})};
  auto found = audit.tick(gpus, tenants, {sample({{100, 2 * kGiB}})});
  ASSERT_EQ(kinds(found), (std::vector{ViolationKind::kOverCap, ViolationKind::kBooks}));
  const Violation& over = found[0].kind == ViolationKind::kOverCap ? found[0] : found[1];
  EXPECT_EQ(over.tenant, "a");
  EXPECT_EQ(over.gpu, 0u);
  EXPECT_EQ(over.gpu_uuid, gpus[0].uuid);
  EXPECT_EQ(over.pid, 100);
  EXPECT_EQ(over.bytes, 2 * kGiB);
  EXPECT_EQ(over.action, "logged");
  // Staying over is the same episode.
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, 2 * kGiB}})}).empty());
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, 3 * kGiB}})}).empty());
  // Back under, then over again: a new episode.
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, 512 * kMiB}})}).empty());
  EXPECT_EQ(audit.open_episodes(), 0u);
  EXPECT_EQ(kinds(audit.tick(gpus, tenants, {sample({{100, 2 * kGiB}})})),
            (std::vector{ViolationKind::kOverCap, ViolationKind::kBooks}));
}

TEST_F(UsageAuditTest, TheToleranceIsTheFloorOrTwoPercentOfTheLimit) {
  UsageAudit audit = make();
  EXPECT_EQ(audit.tolerance(kGiB), 64 * kMiB);
  EXPECT_EQ(audit.tolerance(100 * kGiB), 2 * kGiB);
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, kGiB}})};
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, kGiB + 60 * kMiB}})}).empty());
  EXPECT_EQ(kinds(audit.tick(gpus, tenants, {sample({{100, kGiB + 70 * kMiB}})})),
            (std::vector{ViolationKind::kOverCap}));
}

TEST_F(UsageAuditTest, ABypassingDescendantOfARegisteredProcessIsUnregisteredAndOverCap) {
  UsageAudit audit = make();
  processes.add(100, 1);
  processes.add(150, 100);  // e.g. a shell the registered process started
  processes.add(200, 150);  // the bypass: dlmopen'ed driver, no shim
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 0}}),
                                         tenant("b", 2 * kGiB, {{300, 64 * kMiB}})};
  auto found = audit.tick(gpus, tenants, {sample({{200, 8 * kGiB}, {300, 64 * kMiB}})});
  ASSERT_EQ(kinds(found), (std::vector{ViolationKind::kOverCap, ViolationKind::kUnregistered}));
  for (const Violation& v : found) {
    EXPECT_EQ(v.tenant, "a");
    EXPECT_EQ(v.pid, 200) << "over_cap names the unregistered process as the offender";
    EXPECT_EQ(v.bytes, 8 * kGiB);
  }
  const Violation& unregistered =
      found[0].kind == ViolationKind::kUnregistered ? found[0] : found[1];
  EXPECT_NE(unregistered.detail.find("ancestor pid 100"), std::string::npos) << unregistered.detail;
}

TEST_F(UsageAuditTest, AnAncestorWhosePidWasReusedDoesNotAttribute) {
  UsageAudit audit = make();
  processes.add(100, 1);
  processes.add(200, 100);
  AuditTenant a = tenant("a", kGiB, {{100, 0}});
  a.processes[0].start_time = 99;  // the registered pid 100 is another process than 200's parent
  EXPECT_TRUE(audit.tick(gpus, {a}, {sample({{200, 8 * kGiB}})}).empty());
}

TEST_F(UsageAuditTest, AProcessInTheCgroupOfExactlyOneTenantIsAttributed) {
  UsageAudit audit = make();
  processes.add(100, 1, "0::/kubepods/pod-a/c1");
  processes.add(300, 1, "0::/kubepods/pod-a/c1");  // no ancestry: started by the runtime
  const std::vector<AuditTenant> one{tenant("a", kGiB, {{100, 0}})};
  auto found = audit.tick(gpus, one, {sample({{300, 512 * kMiB}})});
  ASSERT_EQ(kinds(found), (std::vector{ViolationKind::kUnregistered}));
  EXPECT_EQ(found[0].tenant, "a");
  EXPECT_NE(found[0].detail.find("cgroup"), std::string::npos);
}

TEST_F(UsageAuditTest, ASharedCgroupOrTheBrokersOwnAttributesNothing) {
  processes.add(100, 1, "0::/shared");
  processes.add(101, 1, "0::/shared");
  processes.add(300, 1, "0::/shared");
  {
    UsageAudit audit = make();
    const std::vector<AuditTenant> two{tenant("a", kGiB, {{100, 0}}),
                                       tenant("b", kGiB, {{101, 0}})};
    EXPECT_TRUE(audit.tick(gpus, two, {sample({{300, 8 * kGiB}})}).empty());
  }
  processes.add(100, 1, "0::/system.slice/fracgpu-broker.service");
  processes.add(300, 1, "0::/system.slice/fracgpu-broker.service");
  UsageAudit audit = make();
  EXPECT_TRUE(
      audit.tick(gpus, {tenant("a", kGiB, {{100, 0}})}, {sample({{300, 8 * kGiB}})}).empty());
}

// cgroup v1 (issue 27, row 5): a container is one path in each hierarchy; the "0::/" line
// beside them says nothing. The memory hierarchy's path identifies the container.
TEST_F(UsageAuditTest, OnACgroupV1NodeTheContainersMemoryCgroupAttributes) {
  const std::string container =
      "12:pids:/kubepods/burstable/pod-a/c1\n4:memory:/kubepods/burstable/pod-a/c1\n"
      "3:cpuset:/\n1:name=systemd:/kubepods/burstable/pod-a/c1\n0::/";
  processes.add(kBroker, 1,
                "4:memory:/system.slice/fracgpu.service\n1:name=systemd:/system.slice/"
                "fracgpu.service\n0::/");
  processes.add(100, 1, container);
  processes.add(300, 1, container);  // exec'd into the container: no ancestry
  // Another container's process and a host process at the root of every hierarchy.
  processes.add(301, 1, "4:memory:/kubepods/burstable/pod-b/c1\n0::/");
  processes.add(302, 1, "4:memory:/\n1:name=systemd:/\n0::/");
  UsageAudit audit = make(AuditAction::kKill);
  const std::vector<AuditTenant> one{tenant("a", kGiB, {{100, 0}})};
  auto found =
      audit.tick(gpus, one, {sample({{300, 512 * kMiB}, {301, 8 * kGiB}, {302, 8 * kGiB}})});
  ASSERT_EQ(kinds(found), (std::vector{ViolationKind::kUnregistered}));
  EXPECT_EQ(found[0].pid, 300);
  EXPECT_EQ(processes.killed, std::vector<int32_t>{300});
}

// A v1 host whose processes all sit at the root of every hierarchy: their cgroup files are
// equal, and say nothing. Read as one string (d28724a), a registered process's file matched
// every host process's, and the kill action stopped a stranger's job.
TEST_F(UsageAuditTest, RootCgroupsOfAV1HostAttributeNothing) {
  const std::string root = "9:name=systemd:/\n8:pids:/\n4:memory:/\n1:cpu:/\n0::/";
  processes.add(kBroker, 1, "4:memory:/system.slice/fracgpu.service\n0::/");
  processes.add(100, 1, root);
  processes.add(400, 1, root);  // a host job without the shim, not a descendant
  UsageAudit audit = make(AuditAction::kKill);
  EXPECT_TRUE(
      audit.tick(gpus, {tenant("a", kGiB, {{100, 0}})}, {sample({{400, 8 * kGiB}})}).empty());
  EXPECT_TRUE(processes.killed.empty());
}

TEST_F(UsageAuditTest, AProcessAttributedToNoTenantIsNeitherReportedNorKilled) {
  UsageAudit audit = make(AuditAction::kKill);
  processes.add(100, 1);
  processes.add(400, 1, "0::/user.slice/other");
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 0}})};
  EXPECT_TRUE(
      audit.tick(gpus, tenants, {sample({{400, 15 * kGiB}, {kBroker, 300 * kMiB}})}).empty());
  EXPECT_TRUE(processes.killed.empty());
}

TEST_F(UsageAuditTest, KillStopsTheOffenderOnceThroughThePort) {
  UsageAudit audit = make(AuditAction::kKill);
  processes.add(100, 1);
  processes.add(200, 100);
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 0}})};
  auto found = audit.tick(gpus, tenants, {sample({{200, 8 * kGiB}})});
  ASSERT_EQ(found.size(), 2u);
  for (const Violation& v : found) EXPECT_EQ(v.action, "killed");
  EXPECT_EQ(processes.killed, std::vector<int32_t>{200});
  EXPECT_EQ(processes.killed_starts, std::vector<uint64_t>{1200}) << "by pid AND start time";
  // Gone from the next sample: the episodes end, nothing new.
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({})}).empty());
  EXPECT_EQ(audit.open_episodes(), 0u);
}

TEST_F(UsageAuditTest, KillNeverHitsARecycledPid) {
  UsageAudit audit = make(AuditAction::kKill);
  processes.add(100, 1);
  processes.add(200, 100);
  // Seen (its facts cached) while its parent is not registered yet: nobody's process.
  EXPECT_TRUE(audit.tick(gpus, {tenant("a", kGiB, {})}, {sample({{200, 8 * kGiB}})}).empty());
  // It exits, an unrelated process gets pid 200, and the old parent registers.
  processes.table[200] = ProcessFacts{777777, 1, "0::/user.slice/other"};
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 0}})};
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{200, 8 * kGiB}})}).empty())
      << "the cached attribution is re-checked against the start time before anything is done";
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{200, 8 * kGiB}})}).empty())
      << "looked at afresh, the new process belongs to no tenant";
  EXPECT_TRUE(processes.killed.empty());
}

TEST_F(UsageAuditTest, ARegisteredProcessAboveItsBooksIsBooks) {
  UsageAudit audit = make();
  const std::vector<AuditTenant> tenants{tenant("a", 4 * kGiB, {{100, 100 * kMiB}})};
  // Its context (footprint) and the tolerance are allowed for.
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, 100 * kMiB + 64 * kMiB}})}).empty());
  auto found = audit.tick(gpus, tenants, {sample({{100, kGiB}})});
  ASSERT_EQ(kinds(found), (std::vector{ViolationKind::kBooks}));
  EXPECT_EQ(found[0].bytes, kGiB - 100 * kMiB);
  EXPECT_EQ(found[0].pid, 100);
}

TEST_F(UsageAuditTest, AGpuThatCouldNotBeReadKeepsItsEpisodes) {
  UsageAudit audit = make();
  const std::vector<AuditTenant> tenants{tenant("a", kGiB, {{100, 2 * kGiB}})};
  ASSERT_EQ(audit.tick(gpus, tenants, {sample({{100, 2 * kGiB}})}).size(), 1u);
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({}, /*ok=*/false)}).empty());
  EXPECT_EQ(audit.open_episodes(), 1u);
  EXPECT_TRUE(audit.tick(gpus, tenants, {sample({{100, 2 * kGiB}})}).empty())
      << "the same episode, not a new one";
}

TEST_F(UsageAuditTest, ASteadyTickReadsNothingFromProc) {
  UsageAudit audit = make();
  processes.add(100, 1);
  processes.add(200, 100);
  processes.add(400, 1, "0::/elsewhere");
  const std::vector<AuditTenant> tenants{tenant("a", 16 * kGiB, {{100, 64 * kMiB}})};
  const AuditSample s = sample({{100, 64 * kMiB}, {200, 64 * kMiB}, {400, 64 * kMiB}});
  audit.tick(gpus, tenants, {s});
  const int after_first = processes.describes;
  for (int i = 0; i < 10; ++i) audit.tick(gpus, tenants, {s});
  EXPECT_EQ(processes.describes, after_first) << "attribution is cached per pid and start time";
  EXPECT_EQ(audit.cached_processes(), 2u) << "the unregistered ones";
  audit.tick(gpus, tenants, {sample({{100, 64 * kMiB}})});
  EXPECT_EQ(audit.cached_processes(), 0u) << "forgotten once no GPU lists them";
}

TEST_F(UsageAuditTest, KindNamesAreTheDocumentedOnes) {
  EXPECT_STREQ(violation_kind_name(ViolationKind::kOverCap), "over_cap");
  EXPECT_STREQ(violation_kind_name(ViolationKind::kUnregistered), "unregistered");
  EXPECT_STREQ(violation_kind_name(ViolationKind::kBooks), "books");
  EXPECT_STREQ(violation_kind_name(ViolationKind::kLedger), "ledger");
  EXPECT_STREQ(violation_kind_name(ViolationKind::kQuota), "quota");
}

}  // namespace
}  // namespace fracgpu::broker
