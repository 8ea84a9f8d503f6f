// Restoring tenants.json without ever losing a tenant silently: the whole file is
// validated before anything is applied; a bad field, a tenant that no longer passes
// admission or whose files are unusable stops the restore naming the tenant and the
// field (the file untouched), or with keep_going is quarantined: not served, listed with
// its reason, written back verbatim by every later admin change, the file backed up
// first. Garbage in every file the registry reads at start (tenants.json, its leftover
// .tmp, the quota and ledger segments) and ledgers whose header was reset, rebuilt from
// the live processes' slots rather than zeroed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

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

GpuInventory one_gpu(uint64_t memory = 16 * kGiB) {
  GpuInventory inv;
  inv.gpus.push_back({0, "GPU-01234567-89ab-cdef-0123-456789abcdef", "sim", memory, 300 << 20});
  return inv;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

json tenant(const std::string& name, uint64_t limit, uint64_t request) {
  return {{"name", name},
          {"devices", {{{"gpu", 0}, {"memory_limit", limit}, {"memory_request", request}}}}};
}

std::string tenants_file(const std::vector<json>& entries) {
  return json{{"version", 1}, {"tenants", entries}}.dump(2) + "\n";
}

std::vector<std::filesystem::path> backups(const std::filesystem::path& state_dir) {
  static const std::regex name(R"(tenants\.json\.\d{8}T\d{6}Z(-\d+)?\.bak)");
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(state_dir))
    if (std::regex_match(e.path().filename().string(), name)) out.push_back(e.path());
  return out;
}

json persisted_entry(const std::filesystem::path& file, const std::string& name) {
  const json doc = json::parse(read_file(file));
  for (const auto& t : doc["tenants"])
    if (t.value("name", "") == name) return t;
  return nullptr;
}

class StateRecovery : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_directories(config.state_dir); }
  std::filesystem::path state_file() const { return config.state_dir / "tenants.json"; }

  std::unique_ptr<TenantRegistry> registry(uint64_t reserve = 0) {
    RegistryConfig c = config;
    c.reserve = reserve;
    auto r = std::make_unique<TenantRegistry>(c, gpus);
    EXPECT_TRUE(r->prepare().ok());
    return r;
  }

  TempDir dir;
  GpuInventory gpus = one_gpu();
  RegistryConfig config{dir.path() / "run", dir.path() / "state", 0};
  const json bad_b = {{"name", "b"},
                      {"devices", {{{"gpu", 0}, {"memory_limit", 1024}, {"memory_requst", 512}}}}};
};

TEST_F(StateRecovery, ABadFieldStopsTheRestoreNamingTenantAndFieldAndChangesNothing) {
  const std::string text = tenants_file({tenant("a", kGiB, kGiB), bad_b});
  write_file(state_file(), text);
  auto r = registry();
  auto restored = r->restore(RestoreOptions{.keep_going = false});
  ASSERT_FALSE(restored.ok());
  EXPECT_NE(restored.error().find("tenant b"), std::string::npos) << restored.error();
  EXPECT_NE(restored.error().find("memory_requst"), std::string::npos) << restored.error();
  EXPECT_NE(restored.error().find("--keep-going"), std::string::npos) << restored.error();
  EXPECT_EQ(r->all().size(), 0u);  // nothing applied, not even the good tenant
  EXPECT_EQ(read_file(state_file()), text);
  EXPECT_TRUE(backups(config.state_dir).empty());
}

TEST_F(StateRecovery, KeepGoingQuarantinesAndNoAdminChangeEverDropsTheEntry) {
  write_file(state_file(), tenants_file({tenant("a", kGiB, kGiB), bad_b}));
  const std::string original = read_file(state_file());
  auto r = registry();
  auto restored = r->restore(RestoreOptions{.keep_going = true});
  ASSERT_TRUE(restored.ok()) << restored.error();
  EXPECT_EQ(*restored, 1u);
  ASSERT_EQ(r->quarantined().size(), 1u);
  EXPECT_EQ(r->quarantined()[0].name, "b");
  EXPECT_NE(r->quarantined()[0].reason.find("memory_requst"), std::string::npos);
  const json listed = r->quarantined_json();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["name"], "b");
  EXPECT_TRUE(listed[0]["quarantined"].get<bool>());
  // The file was backed up, as it was, before anything writes it again.
  const auto copies = backups(config.state_dir);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(read_file(copies[0]), original);

  ASSERT_TRUE(r->create(tenant("c", kGiB, 0)).ok());
  EXPECT_EQ(persisted_entry(state_file(), "b"), bad_b);
  ASSERT_TRUE(
      r->update(json{{"name", "a"}, {"devices", {{{"gpu", 0}, {"memory_limit", 2 * kGiB}}}}}).ok());
  EXPECT_EQ(persisted_entry(state_file(), "b"), bad_b);
  TenantSpec a = r->find("a")->spec;
  a.pod = {"ns", "pod", "main"};
  ASSERT_TRUE(r->persist_replacing(a).ok());
  EXPECT_EQ(persisted_entry(state_file(), "b"), bad_b);
  ASSERT_TRUE(r->remove("a").ok());
  EXPECT_EQ(persisted_entry(state_file(), "b"), bad_b);

  // The name stays taken, with the reason, until the admin fixes or deletes it.
  auto again = r->create(tenant("b", kGiB, 0));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().find("quarantined"), std::string::npos) << again.error();
  EXPECT_FALSE(
      r->update(json{{"name", "b"}, {"devices", {{{"gpu", 0}, {"memory_limit", kGiB}}}}}).ok());

  // A restart with the entry still bad quarantines it again; deleting it is the admin's call.
  auto restarted = registry();
  ASSERT_TRUE(restarted->restore(RestoreOptions{.keep_going = true}).ok());
  ASSERT_EQ(restarted->quarantined().size(), 1u);
  ASSERT_TRUE(restarted->remove("b").ok());
  EXPECT_TRUE(restarted->quarantined().empty());
  EXPECT_TRUE(persisted_entry(state_file(), "b").is_null());
  EXPECT_FALSE(persisted_entry(state_file(), "c").is_null());
}

TEST_F(StateRecovery, ATruncatedFileNeverStartsWithoutItsTenants) {
  const std::string text = tenants_file({tenant("a", kGiB, kGiB), tenant("b", kGiB, kGiB)});
  const std::size_t content = text.find_last_not_of(" \n") + 1;
  for (std::size_t cut = 0; cut < content; ++cut) {
    write_file(state_file(), text.substr(0, cut));
    auto loaded = StateStore(config.state_dir).load();
    ASSERT_FALSE(loaded.ok()) << "a file cut at byte " << cut << " was accepted";
    EXPECT_NE(loaded.error().find("tenants.json"), std::string::npos);
  }
  write_file(state_file(), text.substr(0, text.size() / 2));
  auto strict = registry();
  EXPECT_FALSE(strict->restore(RestoreOptions{.keep_going = false}).ok());
  EXPECT_EQ(read_file(state_file()), text.substr(0, text.size() / 2));
  auto lenient = registry();
  auto restored = lenient->restore(RestoreOptions{.keep_going = true});
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, 0u);
  const auto copies = backups(config.state_dir);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(read_file(copies[0]), text.substr(0, text.size() / 2));
}

TEST_F(StateRecovery, GarbageVersionsAndDuplicatesAreNamed) {
  std::mt19937 random(7);
  std::string garbage(4096, '\0');
  for (char& c : garbage) c = static_cast<char>(random());
  for (const std::string& text :
       {garbage, std::string(), std::string("[]"), std::string(R"({"tenants":{}})"),
        json{{"version", 2}, {"tenants", json::array()}}.dump(),
        json{{"tenants", json::array()}}.dump()}) {
    write_file(state_file(), text);
    auto loaded = StateStore(config.state_dir).load();
    EXPECT_FALSE(loaded.ok()) << "accepted: " << text.substr(0, 40);
    EXPECT_EQ(read_file(state_file()), text);
  }
  write_file(state_file(),
             tenants_file({tenant("a", kGiB, 0), tenant("a", 2 * kGiB, 0), json(17)}));
  auto loaded = StateStore(config.state_dir).load();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->specs.size(), 1u);
  EXPECT_EQ(loaded->specs[0].devices[0].memory_limit, kGiB);
  ASSERT_EQ(loaded->invalid.size(), 2u);
  EXPECT_NE(loaded->invalid[0].reason.find("same name"), std::string::npos);
  EXPECT_EQ(loaded->invalid[1].name, "entry 3");
}

TEST_F(StateRecovery, ALeftoverTemporaryFileIsIgnoredAndRemoved) {
  const std::string text = tenants_file({tenant("a", kGiB, 0)});
  write_file(state_file(), text);
  write_file(config.state_dir / "tenants.json.tmp", "{\"version\":1,\"tenants\":[{\"na");
  auto r = registry();
  auto restored = r->restore(RestoreOptions{.keep_going = false});
  ASSERT_TRUE(restored.ok()) << restored.error();
  EXPECT_EQ(*restored, 1u);
  EXPECT_FALSE(std::filesystem::exists(config.state_dir / "tenants.json.tmp"));
  EXPECT_EQ(read_file(state_file()), text);
}

TEST_F(StateRecovery, RestoredSpecsGoThroughAdmission) {
  // 30 GiB of requests on a 16 GiB GPU: the second tenant does not fit the first.
  write_file(state_file(),
             tenants_file({tenant("a", 15 * kGiB, 15 * kGiB), tenant("b", 15 * kGiB, 15 * kGiB)}));
  auto strict = registry();
  auto refused = strict->restore(RestoreOptions{.keep_going = false});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("tenant b"), std::string::npos) << refused.error();
  EXPECT_NE(refused.error().find("memory request"), std::string::npos) << refused.error();
  EXPECT_EQ(refused.error().find("tenant a"), std::string::npos) << refused.error();

  auto lenient = registry();
  ASSERT_TRUE(lenient->restore(RestoreOptions{.keep_going = true}).ok());
  EXPECT_NE(lenient->find("a"), nullptr);
  EXPECT_EQ(lenient->find("b"), nullptr);
  ASSERT_EQ(lenient->quarantined().size(), 1u);
  EXPECT_NE(lenient->quarantined()[0].reason.find("admission"), std::string::npos);
  EXPECT_FALSE(persisted_entry(state_file(), "b").is_null());
}

TEST_F(StateRecovery, AGrownReserveIsRefusedAMissingGpuKeepsItsTenant) {
  write_file(state_file(), tenants_file({tenant("a", 15 * kGiB, kGiB)}));
  auto grown = registry(/*reserve=*/2 * kGiB);
  auto refused = grown->restore(RestoreOptions{.keep_going = false});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("tenant a"), std::string::npos);
  EXPECT_NE(refused.error().find("memory limit"), std::string::npos) << refused.error();

  json on_gpu_1 = tenant("z", kGiB, 0);
  on_gpu_1["devices"][0]["gpu"] = 1;
  write_file(state_file(), tenants_file({on_gpu_1}));
  // A GPU that is gone is the hardware's doing: the tenant is kept (logged), not refused.
  auto missing = registry();
  auto kept = missing->restore(RestoreOptions{.keep_going = false});
  ASSERT_TRUE(kept.ok()) << kept.error();
  EXPECT_NE(missing->find("z"), nullptr);
  EXPECT_TRUE(missing->quarantined().empty());
}

TEST_F(StateRecovery, UnusableTenantFilesStopOrQuarantineNeverDrop) {
  write_file(state_file(), tenants_file({tenant("a", kGiB, 0), tenant("b", kGiB, 0)}));
  std::filesystem::create_directories(config.run_dir / "ledgers" / "b");  // not a file
  auto strict = registry();
  auto refused = strict->restore(RestoreOptions{.keep_going = false});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("tenant b cannot be restored"), std::string::npos)
      << refused.error();
  strict.reset();
  auto lenient = registry();
  ASSERT_TRUE(lenient->restore(RestoreOptions{.keep_going = true}).ok());
  EXPECT_NE(lenient->find("a"), nullptr);
  ASSERT_EQ(lenient->quarantined().size(), 1u);
  EXPECT_EQ(lenient->quarantined()[0].name, "b");
  EXPECT_TRUE(std::filesystem::is_directory(config.run_dir / "ledgers" / "b"));  // left as found
}

// A broker killed after a reset of the ledger's header (zeroed) must not forget what the
// tenant's live processes hold: their slots are the record, and the header is rebuilt.
TEST_F(StateRecovery, AZeroedLedgerHeaderIsRebuiltFromTheLiveSlots) {
  uint32_t live = 0, dead = 0;
  {
    auto r = registry();
    auto t = r->create(tenant("a", 8 * kGiB, kGiB));
    ASSERT_TRUE(t.ok()) << t.error();
    (*t)->quota().devices[0].memory_grant = 4 * kGiB;
    live = *ledger::claim_slot((*t)->ledger(), ::getpid(), 11);
    dead = *ledger::claim_slot((*t)->ledger(), 999999, 12);
    ASSERT_TRUE(ledger::reserve((*t)->ledger(), (*t)->quota(), live, 0, 2 * kGiB));
    ASSERT_TRUE(ledger::reserve((*t)->ledger(), (*t)->quota(), dead, 0, kGiB));
    ledger::mark_dead((*t)->ledger(), dead);
  }
  const auto ledger_file = config.run_dir / "ledgers" / "a";
  {
    const int fd = ::open(ledger_file.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const char zeros[64] = {};
    ASSERT_EQ(::pwrite(fd, zeros, sizeof zeros, 0), 64);  // magic, version, size, reserved
    ::close(fd);
  }
  auto r = registry();
  ASSERT_TRUE(r->restore(RestoreOptions{.keep_going = false}).ok());
  Tenant* t = r->find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->segments->ledger_rebuilt());
  EXPECT_TRUE(ledger_layout_ok(t->ledger(), sizeof(TenantLedger)));
  EXPECT_EQ(t->ledger().devices[0].used.load(), 2 * kGiB);  // the live process's, not 0, not 3
  EXPECT_EQ(t->ledger().processes[live].pid.load(), ::getpid());
  EXPECT_EQ(t->ledger().processes[live].used[0].load(), 2 * kGiB);
  EXPECT_EQ(t->ledger().processes[dead].state.load(), static_cast<uint32_t>(SlotState::kFree));
  // It keeps counting exactly: the live process frees what it holds.
  ledger::release(t->ledger(), live, 0, 2 * kGiB);
  EXPECT_EQ(t->ledger().devices[0].used.load(), 0u);
}

TEST_F(StateRecovery, GarbageInEverySegmentFileStillRestoresEveryTenant) {
  {
    auto r = registry();
    ASSERT_TRUE(r->create(tenant("a", 8 * kGiB, kGiB)).ok());
    ASSERT_TRUE(r->create(tenant("b", 2 * kGiB, kGiB)).ok());
    ASSERT_TRUE(r->create(tenant("c", 2 * kGiB, kGiB)).ok());
  }
  std::mt19937 random(42);
  auto scribble = [&](const std::filesystem::path& p, std::size_t size) {
    std::string bytes(size, '\0');
    for (char& ch : bytes) ch = static_cast<char>(random());
    write_file(p, bytes);
  };
  scribble(config.run_dir / "ledgers" / "a", sizeof(TenantLedger));  // garbage throughout
  scribble(config.run_dir / "pods" / "a" / "quota", sizeof(TenantQuota));
  write_file(config.run_dir / "ledgers" / "b", "short");   // truncated
  scribble(config.run_dir / "pods" / "c" / "quota", 100);  // truncated garbage
  auto r = registry();
  auto restored = r->restore(RestoreOptions{.keep_going = false});
  ASSERT_TRUE(restored.ok()) << restored.error();
  EXPECT_EQ(*restored, 3u);
  for (const char* name : {"a", "b", "c"}) {
    Tenant* t = r->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_TRUE(ledger_layout_ok(t->ledger(), sizeof(TenantLedger))) << name;
    EXPECT_TRUE(quota_layout_ok(t->quota(), sizeof(TenantQuota))) << name;
    EXPECT_EQ(t->quota().devices[0].memory_limit.load(), t->spec.devices[0].memory_limit) << name;
    EXPECT_EQ(t->ledger().devices[0].used.load(), ledger::live_slot_sum(t->ledger(), 0)) << name;
    const uint64_t grant = t->quota().devices[0].memory_grant.load();
    EXPECT_GE(grant, t->spec.devices[0].memory_request) << name;
    EXPECT_LE(grant, t->spec.devices[0].memory_limit) << name;
  }
}

// A quota file found damaged while the ledger still counts live usage: the grant is
// re-published over what is used, so the processes are not left above their grant.
TEST_F(StateRecovery, ARebuiltQuotaGrantsWhatIsAlreadyUsed) {
  uint32_t slot = 0;
  {
    auto r = registry();
    auto t = r->create(tenant("a", 8 * kGiB, kGiB));
    ASSERT_TRUE(t.ok());
    (*t)->quota().devices[0].memory_grant = 4 * kGiB;
    slot = *ledger::claim_slot((*t)->ledger(), ::getpid(), 1);
    ASSERT_TRUE(ledger::reserve((*t)->ledger(), (*t)->quota(), slot, 0, 3 * kGiB));
  }
  write_file(config.run_dir / "pods" / "a" / "quota", std::string(sizeof(TenantQuota), '\0'));
  auto r = registry();
  ASSERT_TRUE(r->restore(RestoreOptions{.keep_going = false}).ok());
  Tenant* t = r->find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->ledger().devices[0].used.load(), 3 * kGiB);
  EXPECT_EQ(t->quota().devices[0].memory_grant.load(), 3 * kGiB);
  EXPECT_EQ(t->quota().devices[0].memory_limit.load(), 8 * kGiB);
}

}  // namespace
}  // namespace fracgpu::broker
