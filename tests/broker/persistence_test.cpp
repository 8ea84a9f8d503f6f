// Persistence round trips: tenants.json written atomically and read back, and a new
// TenantRegistry (a restarted broker) re-attaching the existing quota and ledger files
// without resetting counters, grants or registered slots.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/ledger_ops.h"
#include "core/state_store.h"
#include "core/tenant_registry.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;
using testing::kGiB;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "fracgpu-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

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
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0], *a);
  EXPECT_EQ(loaded[1], *b);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "tenants.json.tmp"));
}

TEST_F(Persistence, CorruptStateIsMovedAsideNotFatal) {
  StateStore store(dir.path());
  std::ofstream(store.file()) << "{not json";
  EXPECT_TRUE(store.load().empty());
  EXPECT_TRUE(std::filesystem::exists(store.file().string() + ".bad"));
}

TEST_F(Persistence, RegistryCreatesFilesWithModes) {
  TenantRegistry registry(config, gpus);
  ASSERT_TRUE(registry.prepare().ok());
  auto t = registry.create(
      json::parse(R"({"name":"a","devices":[{"gpu":0,"memory_limit":1073741824}]})"));
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(mode_of((*t)->dir), 0755u);
  EXPECT_EQ(mode_of((*t)->dir / "quota"), 0644u);
  EXPECT_EQ(mode_of((*t)->dir / "ledger"), 0666u);
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
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "tenants" / "b"));
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

}  // namespace
}  // namespace fracgpu::broker
