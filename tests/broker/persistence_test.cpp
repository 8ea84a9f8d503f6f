// Persistence round trips: tenants.json written atomically and read back, and a new
// TenantRegistry (a restarted broker) re-attaching the existing quota and ledger files
// without resetting counters, grants or registered slots; the run directory's layout
// and modes (fracgpu/paths.h), and the move of an old layout's files into it without
// detaching the processes that map them; a tenant's Kubernetes container ("pod") kept
// across a restart.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/ledger_ops.h"
#include "core/state_store.h"
#include "core/tenant_registry.h"
#include "temp_dir.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;
using testing::kGiB;

using testing::TempDir;

GpuInventory one_gpu() {
  GpuInventory inv;
  inv.gpus.push_back({0, "GPU-01234567-89ab-cdef-0123-456789abcdef", "sim", 16 * kGiB, 300 << 20});
  return inv;
}

mode_t mode_of(const std::filesystem::path& p) {
  struct stat st {};
  ::stat(p.c_str(), &st);
  return st.st_mode & 07777;
}

class Persistence : public ::testing::Test {
 protected:
  TempDir dir;
  GpuInventory gpus = one_gpu();
  RegistryConfig config{dir.path() / "run", dir.path() / "state", 0};
};

TEST_F(Persistence, StateStoreRoundTrip) {
  StateStore store(dir.path());
  ASSERT_TRUE(store.prepare().ok());
  auto a = tenant_spec_from_json(json::parse(
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":100,"memory_request":50,"compute":30,"compute_limit":60,"priority":"low","uuid":"GPU-x"}]})"));
  auto b =
      tenant_spec_from_json(json::parse(R"({"name":"b","devices":[{"gpu":0,"memory_limit":7}]})"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(store.save({&*a, &*b}).ok());
  const auto loaded = store.load();
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  ASSERT_EQ(loaded->specs.size(), 2u);
  EXPECT_EQ(loaded->specs[0], *a);
  EXPECT_EQ(loaded->specs[1], *b);
  EXPECT_TRUE(loaded->invalid.empty());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "tenants.json.tmp"));
}

// A damaged file is reported and left exactly where it is: moving it aside would let the
// next admin change write a list without its tenants (state_recovery_test.cpp has more).
TEST_F(Persistence, CorruptStateIsReportedAndLeftInPlace) {
  StateStore store(dir.path());
  std::ofstream(store.file()) << "{not json";
  const auto loaded = store.load();
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.error().find(store.file().string()), std::string::npos) << loaded.error();
  EXPECT_TRUE(std::filesystem::exists(store.file()));
  EXPECT_FALSE(std::filesystem::exists(store.file().string() + ".bad"));
}

TEST_F(Persistence, RegistryCreatesFilesWithModes) {
  const mode_t old_umask = ::umask(0);  // the modes must not depend on it
  TenantRegistry registry(config, gpus);
  ASSERT_TRUE(registry.prepare().ok());
  auto t = registry.create(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":1073741824}]})"));
  ::umask(old_umask);
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(mode_of(config.run_dir), 0755u);
  EXPECT_EQ(mode_of(config.run_dir / "tenants"), 0711u);
  EXPECT_EQ(mode_of(config.run_dir / "pods"), 0700u);
  EXPECT_EQ(mode_of(config.run_dir / "ledgers"), 0700u);
  EXPECT_EQ((*t)->dir, config.run_dir / "pods" / "a");  // no owners
  EXPECT_EQ((*t)->ledger_path, config.run_dir / "ledgers" / "a");
  EXPECT_EQ(mode_of((*t)->dir), 0711u);
  EXPECT_EQ(mode_of((*t)->dir / "quota"), 0644u);
  EXPECT_FALSE(std::filesystem::exists((*t)->dir / "ledger"));
  EXPECT_EQ(mode_of((*t)->ledger_path), 0600u);
  const TenantQuota& q = (*t)->quota();
  EXPECT_TRUE(quota_layout_ok(q, sizeof q));
  EXPECT_STREQ(q.tenant, "a");
  EXPECT_EQ(q.device_count, 1u);
  EXPECT_STREQ(q.devices[0].uuid, "GPU-01234567-89ab-cdef-0123-456789abcdef");
  EXPECT_EQ(q.devices[0].memory_limit.load(), kGiB);
  EXPECT_EQ(q.devices[0].memory_grant.load(), kGiB);
  EXPECT_EQ(q.devices[0].context_footprint.load(), 300u << 20);
  EXPECT_EQ(q.devices[0].compute_weight.load(), 100u);
  EXPECT_GE(q.generation.load(), 1u);
  EXPECT_FALSE(
      registry.create(json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":1}]})")).ok());
}

TEST_F(Persistence, RestartKeepsTenantsCountersAndSlots) {
  uint32_t slot = 0;
  {
    TenantRegistry registry(config, gpus);
    ASSERT_TRUE(registry.prepare().ok());
    auto t = registry.create(json::parse(
        R"({"name":"a","devices":[{"gpu":0,"memory_limit":8589934592,"memory_request":1073741824,"priority":"low"}]})"));
    ASSERT_TRUE(t.ok()) << t.error();
    slot = *ledger::claim_slot((*t)->ledger(), 4242, 99);
    (*t)->quota().devices[0].memory_grant = 3 * kGiB;  // a burst was granted
    ASSERT_TRUE(ledger::reserve((*t)->ledger(), (*t)->quota(), slot, 0, 2 * kGiB));
    ASSERT_TRUE(
        registry.create(json::parse(R"({"name":"b","devices":[{"gpu":0,"memory_limit":1024}]})"))
            .ok());
    ASSERT_TRUE(registry.remove("b").ok());
  }
  TenantRegistry restarted(config, gpus);
  ASSERT_TRUE(restarted.prepare().ok());
  EXPECT_EQ(restarted.restore(), 1u);
  Tenant* t = restarted.find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(restarted.find("b"), nullptr);
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "pods" / "b"));
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "ledgers" / "b"));
  EXPECT_TRUE(t->segments->ledger_reused());
  EXPECT_EQ(t->spec.devices[0].priority, PriorityClass::kLow);
  EXPECT_EQ(t->quota().devices[0].memory_limit.load(), 8 * kGiB);
  EXPECT_EQ(t->quota().devices[0].memory_grant.load(), 3 * kGiB);  // kept, not reset to the request
  EXPECT_EQ(t->ledger().devices[0].used.load(), 2 * kGiB);
  EXPECT_EQ(t->ledger().processes[slot].pid.load(), 4242);
  EXPECT_EQ(t->ledger().processes[slot].used[0].load(), 2 * kGiB);
}

TEST_F(Persistence, UpdateKeepsGrantWithinNewBounds) {
  TenantRegistry registry(config, gpus);
  ASSERT_TRUE(registry.prepare().ok());
  auto t = registry.create(json::parse(
      R"({"name":"a","devices":[{"gpu":0,"memory_limit":8589934592,"memory_request":1073741824}]})"));
  ASSERT_TRUE(t.ok());
  (*t)->quota().devices[0].memory_grant = 6 * kGiB;
  auto u = registry.update(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":4294967296}]})"));
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ((*u)->quota().devices[0].memory_grant.load(), 4 * kGiB);
  auto v = registry.update(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_request":4294967296}]})"));
  ASSERT_TRUE(v.ok()) << v.error();
  EXPECT_EQ((*v)->quota().devices[0].memory_grant.load(), 4 * kGiB);
  EXPECT_FALSE(
      registry
          .update(json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":34359738368}]})"))
          .ok());
  EXPECT_FALSE(registry.update(json::parse(R"({"name":"zz","devices":[]})")).ok());
}

// The container the device plugin matched a tenant to is part of tenants.json: a
// restarted broker labels the tenant's metrics as before, and a cleared one stays cleared.
TEST_F(Persistence, PodIdentitySurvivesARestartAndClearingIt) {
  const json pod = {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "main"}};
  {
    TenantRegistry registry(config, gpus);
    ASSERT_TRUE(registry.prepare().ok());
    ASSERT_TRUE(
        registry
            .create(json::parse(
                R"({"name":"s-1a2b3c4d-3","devices":[{"gpu":0,"memory_limit":1073741824}]})"))
            .ok());
    ASSERT_TRUE(
        registry
            .create(json::parse(R"({"name":"other","devices":[{"gpu":0,"memory_limit":1024}]})"))
            .ok());
    auto u = registry.update(json{{"name", "s-1a2b3c4d-3"}, {"pod", pod}});
    ASSERT_TRUE(u.ok()) << u.error();
  }
  std::ifstream in(config.state_dir / "tenants.json");
  const json state = json::parse(in);
  ASSERT_EQ(state["tenants"].size(), 2u);
  EXPECT_EQ(state["tenants"][1]["pod"], pod) << state.dump();  // sorted by name: "other" first
  EXPECT_FALSE(state["tenants"][0].contains("pod")) << state.dump();

  TenantRegistry restarted(config, gpus);
  ASSERT_TRUE(restarted.prepare().ok());
  ASSERT_EQ(restarted.restore(), 2u);
  ASSERT_NE(restarted.find("s-1a2b3c4d-3"), nullptr);
  EXPECT_EQ(restarted.find("s-1a2b3c4d-3")->spec.pod, (PodIdentity{"ml", "trainer-0", "main"}));
  EXPECT_TRUE(restarted.find("other")->spec.pod.empty());
  ASSERT_TRUE(restarted.update(json{{"name", "s-1a2b3c4d-3"}, {"pod", json::object()}}).ok());

  TenantRegistry again(config, gpus);
  ASSERT_TRUE(again.prepare().ok());
  ASSERT_EQ(again.restore(), 2u);
  EXPECT_TRUE(again.find("s-1a2b3c4d-3")->spec.pod.empty());
}

TEST_F(Persistence, TenantsWithOwnersLiveUnderTenantsAndKeepTheirKind) {
  TenantRegistry registry(config, gpus);
  ASSERT_TRUE(registry.prepare().ok());
  auto t = registry.create(json::parse(
      R"({"name":"mine","owners":[1000],"devices":[{"gpu":0,"memory_limit":1073741824}]})"));
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ((*t)->dir, config.run_dir / "tenants" / "mine");
  EXPECT_EQ(mode_of((*t)->dir), 0711u);
  // Issue 27, row 9: a host tenant's quota is private; its processes get a descriptor.
  EXPECT_EQ(mode_of((*t)->dir / "quota"), 0600u);
  EXPECT_EQ(mode_of(config.run_dir / "ledgers" / "mine"), 0600u);
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "pods" / "mine"));

  auto emptied = registry.update(json::parse(R"({"name":"mine","owners":[]})"));
  ASSERT_FALSE(emptied.ok());
  EXPECT_NE(emptied.error().find("cannot lose all its owners"), std::string::npos);
  auto changed = registry.update(json::parse(R"({"name":"mine","owners":[1001,1002]})"));
  ASSERT_TRUE(changed.ok()) << changed.error();
  EXPECT_EQ((*changed)->spec.owners, (std::vector<uint32_t>{1001, 1002}));

  TenantRegistry restarted(config, gpus);  // the owners are persisted
  ASSERT_TRUE(restarted.prepare().ok());
  ASSERT_EQ(restarted.restore(), 1u);
  EXPECT_EQ(restarted.find("mine")->spec.owners, (std::vector<uint32_t>{1001, 1002}));
  EXPECT_EQ(restarted.find("mine")->dir, config.run_dir / "tenants" / "mine");

  ASSERT_TRUE(restarted.remove("mine").ok());
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "tenants" / "mine"));
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "ledgers" / "mine"));
}

TEST_F(Persistence, SocketAccessFollowsTheOwners) {
  TenantSpec spec;
  spec.name = "a";
  EXPECT_EQ(socket_access(spec).mode, 0666u);  // no owners: its pod's mount guards it
  EXPECT_EQ(socket_access(spec).owner, ::geteuid());
  spec.owners = {::geteuid()};
  EXPECT_EQ(socket_access(spec).mode, 0600u);
  EXPECT_EQ(socket_access(spec).owner, ::geteuid());
  spec.owners = {::geteuid(), 4242};
  EXPECT_EQ(socket_access(spec).mode, 0666u);  // several: the uid check at accept guards it
  EXPECT_EQ(socket_access(spec).owner, ::geteuid());
  if (::geteuid() == 0) {
    spec.owners = {4242};
    EXPECT_EQ(socket_access(spec).mode, 0600u);
    EXPECT_EQ(socket_access(spec).owner, 4242u);
  }
}

// The layout before owners: every tenant under tenants/ (0755), the ledger 0666 beside
// the quota. A restarted broker moves both into today's layout by rename, so a process
// that mapped the old files keeps counting in the very ledger the broker reads.
TEST_F(Persistence, RestartMovesTheOldLayoutAndKeepsMappedProcessesCounted) {
  uint32_t slot = 0;
  {
    TenantRegistry registry(config, gpus);
    ASSERT_TRUE(registry.prepare().ok());
    auto t = registry.create(json::parse(
        R"({"name":"old","devices":[{"gpu":0,"memory_limit":8589934592,"memory_request":1073741824}]})"));
    ASSERT_TRUE(t.ok()) << t.error();
    slot = *ledger::claim_slot((*t)->ledger(), 4242, 99);
    ASSERT_TRUE(ledger::reserve((*t)->ledger(), (*t)->quota(), slot, 0, kGiB));
  }
  // Turn it into the old layout.
  const auto run = config.run_dir;
  const auto old_dir = run / "tenants" / "old";
  std::filesystem::create_directories(old_dir);
  ASSERT_EQ(::chmod((run / "tenants").c_str(), 0755), 0);
  ASSERT_EQ(::chmod(old_dir.c_str(), 0755), 0);
  std::filesystem::rename(run / "pods" / "old" / "quota", old_dir / "quota");
  std::filesystem::rename(run / "ledgers" / "old", old_dir / "ledger");
  ASSERT_EQ(::chmod((old_dir / "ledger").c_str(), 0666), 0);
  std::filesystem::remove_all(run / "pods");
  std::filesystem::remove_all(run / "ledgers");

  // A "running process" of the old layout: the ledger mapped by its old path.
  const int fd = ::open((old_dir / "ledger").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto* mapped = static_cast<TenantLedger*>(
      ::mmap(nullptr, sizeof(TenantLedger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  ASSERT_NE(mapped, MAP_FAILED);

  TenantRegistry restarted(config, gpus);
  ASSERT_TRUE(restarted.prepare().ok());
  ASSERT_EQ(restarted.restore(), 1u);
  Tenant* t = restarted.find("old");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->segments->ledger_reused());
  EXPECT_TRUE(t->segments->ledger_migrated());
  EXPECT_EQ(t->dir, run / "pods" / "old");
  EXPECT_FALSE(std::filesystem::exists(old_dir));
  EXPECT_FALSE(std::filesystem::exists(t->dir / "ledger"));
  EXPECT_EQ(mode_of(run / "tenants"), 0711u);
  EXPECT_EQ(mode_of(run / "pods"), 0700u);
  EXPECT_EQ(mode_of(t->dir), 0711u);
  EXPECT_EQ(mode_of(t->dir / "quota"), 0644u);
  EXPECT_EQ(mode_of(run / "ledgers" / "old"), 0600u);
  EXPECT_EQ(t->ledger().devices[0].used.load(), kGiB);
  EXPECT_EQ(t->ledger().processes[slot].pid.load(), 4242);
  // The old mapping and the broker's are one file: what the process counts, the broker sees.
  ledger::release(*mapped, slot, 0, kGiB / 4);
  EXPECT_EQ(t->ledger().devices[0].used.load(), 3 * kGiB / 4);
  EXPECT_EQ(t->ledger().processes[slot].used[0].load(), 3 * kGiB / 4);
  ASSERT_TRUE(ledger::reserve(*mapped, t->quota(), slot, 0, kGiB / 8));
  EXPECT_EQ(t->ledger().devices[0].used.load(), 7 * kGiB / 8);
  ::munmap(mapped, sizeof(TenantLedger));
  // And a registration descriptor is that same file too.
  const int passed = t->segments->ledger_descriptor(true);
  ASSERT_GE(passed, 0);
  struct stat a {
  }, b{};
  ASSERT_EQ(::fstat(passed, &a), 0);
  ASSERT_EQ(::stat((run / "ledgers" / "old").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  ::close(passed);
}

// A ledger found beside the quota while one already exists under ledgers/ is only a path
// into the books a tenant could still open: it is removed, the real one is kept.
TEST_F(Persistence, AStrayLedgerInTheTenantsDirectoryIsRemoved) {
  {
    TenantRegistry registry(config, gpus);
    ASSERT_TRUE(registry.prepare().ok());
    auto t = registry.create(
        json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":1073741824}]})"));
    ASSERT_TRUE(t.ok()) << t.error();
    (*t)->ledger().devices[0].peak = 12345;
  }
  std::ofstream(config.run_dir / "pods" / "a" / "ledger") << std::string(4096, '\0');
  TenantRegistry restarted(config, gpus);
  ASSERT_TRUE(restarted.prepare().ok());
  ASSERT_EQ(restarted.restore(), 1u);
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "pods" / "a" / "ledger"));
  EXPECT_FALSE(restarted.find("a")->segments->ledger_migrated());
  EXPECT_EQ(restarted.find("a")->ledger().devices[0].peak.load(), 12345u);
}

}  // namespace
}  // namespace fracgpu::broker
