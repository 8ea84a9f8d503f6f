// Crash-consistent writes of tenants.json, exhaustively: a save (and a whole admin
// "create" through the registry, quarantined entries and all) is run in a forked child
// that SIGKILLs itself before file-system step N, for every N until the save completes;
// the writes are cut into 16-byte pieces so a kill also lands inside the temporary
// file. After each kill a fresh load must find the old list or the new one, never a torn
// or empty one, and never lose the quarantined entry. The same walk with the step
// failing instead (ENOSPC, EIO) checks the disk-full contract: the save reports the
// error, the old file stays byte for byte, no temporary file remains, and the registry
// changes nothing in memory.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/state_store.h"
#include "core/tenant_registry.h"
#include "step_file_ops.h"
#include "temp_dir.h"
#include "test_segments.h"

namespace fracgpu::broker {
namespace {

using nlohmann::json;
using testing::kGiB;
using testing::StepFileOps;
using testing::TempDir;

constexpr int kMaxSteps = 2000;  // far above any save's steps: a loop that never ends fails

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

GpuInventory one_gpu() {
  GpuInventory inv;
  inv.gpus.push_back({0, "GPU-01234567-89ab-cdef-0123-456789abcdef", "sim", 16 * kGiB, 300 << 20});
  return inv;
}

TenantSpec spec(const std::string& name, uint64_t limit) {
  return *tenant_spec_from_json(
      json{{"name", name}, {"devices", {{{"gpu", 0}, {"memory_limit", limit}}}}});
}

std::set<std::string> names_in(const StoredTenants& stored) {
  std::set<std::string> out;
  for (const TenantSpec& s : stored.specs) out.insert(s.name);
  for (const InvalidTenantEntry& e : stored.invalid) out.insert(e.name + " (quarantined)");
  return out;
}

// Runs `body` in a child; true when the child was killed by SIGKILL, false when it
// finished (its exit status must then be 0).
bool killed_in_child(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(body());
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) {
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    return true;
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  return false;
}

TEST(CrashConsistency, AKillAtEveryStepOfASaveLeavesTheOldOrTheNewList) {
  const TenantSpec a = spec("a", kGiB), b = spec("b", 2 * kGiB), c = spec("c", 3 * kGiB);
  const std::set<std::string> before{"a", "b"}, after{"a", "b", "c"};
  int old_seen = 0, new_seen = 0;
  for (int step = 1; step < kMaxSteps; ++step) {
    TempDir dir;
    ASSERT_TRUE(StateStore(dir.path()).save({&a, &b}).ok());
    const bool killed = killed_in_child([&] {
      StepFileOps ops;
      ops.set_write_chunk(16);
      ops.arm(step, StepFileOps::Action::kKill);
      return StateStore(dir.path(), ops).save({&a, &b, &c}) ? 0 : 3;
    });
    auto loaded = StateStore(dir.path()).load();
    ASSERT_TRUE(loaded.ok()) << "killed before step " << step << ": " << loaded.error();
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "tenants.json.tmp"));
    const auto names = names_in(*loaded);
    if (!killed) {
      EXPECT_EQ(names, after);
      EXPECT_GT(old_seen, 20);  // the 16-byte pieces: many kills inside the temporary file
      EXPECT_GE(new_seen, 1);   // kills after the rename (directory fsync) keep the new list
      return;
    }
    ASSERT_TRUE(names == before || names == after) << "killed before step " << step;
    (names == before ? old_seen : new_seen) += 1;
  }
  FAIL() << "the save never completed";
}

// The whole admin path: a registry restored with a quarantined entry creates a tenant
// and is killed at every step; a restart finds every old tenant, the quarantined entry
// verbatim, and the new tenant exactly when its save got past the rename.
TEST(CrashConsistency, AKillAtEveryStepOfACreateLosesNoTenant) {
  const json bad = {{"name", "q"},
                    {"devices", {{{"gpu", 0}, {"memory_limit", 1}, {"memory_requst", 1}}}}};
  const json file = {{"version", 1}, {"tenants", {tenant_spec_to_json(spec("a", kGiB)), bad}}};
  const GpuInventory gpus = one_gpu();
  int with_c = 0, without_c = 0;
  for (int step = 1; step < kMaxSteps; ++step) {
    TempDir dir;
    const RegistryConfig base{dir.path() / "run", dir.path() / "state", 0};
    std::filesystem::create_directories(base.state_dir);
    std::ofstream(base.state_dir / "tenants.json") << file.dump(2);
    const bool killed = killed_in_child([&] {
      StepFileOps ops;
      ops.set_write_chunk(32);
      RegistryConfig config = base;
      config.file_ops = &ops;
      TenantRegistry registry(config, gpus);
      if (!registry.prepare() || !registry.restore(RestoreOptions{.keep_going = true})) return 4;
      ops.arm(step, StepFileOps::Action::kKill);  // the backup at restore is behind us
      return registry.create(
                 json{{"name", "c"}, {"devices", {{{"gpu", 0}, {"memory_limit", kGiB}}}}})
                 ? 0
                 : 5;
    });
    TenantRegistry restarted(base, gpus);
    ASSERT_TRUE(restarted.prepare().ok());
    auto restored = restarted.restore(RestoreOptions{.keep_going = true});
    ASSERT_TRUE(restored.ok()) << restored.error();
    ASSERT_NE(restarted.find("a"), nullptr) << "step " << step;
    ASSERT_EQ(restarted.quarantined().size(), 1u) << "step " << step;
    EXPECT_EQ(restarted.quarantined()[0].entry, bad);
    const bool has_c = restarted.find("c") != nullptr;
    (has_c ? with_c : without_c) += 1;
    if (!killed) {
      EXPECT_TRUE(has_c);
      EXPECT_GT(without_c, 5);
      return;
    }
  }
  FAIL() << "the create never completed";
}

TEST(CrashConsistency, AFailedStepOfASaveChangesNothingAndSaysWhy) {
  const TenantSpec a = spec("a", kGiB), b = spec("b", 2 * kGiB);
  int failures = 0;
  for (int error : {ENOSPC, EIO}) {
    for (int step = 1; step < kMaxSteps; ++step) {
      TempDir dir;
      ASSERT_TRUE(StateStore(dir.path()).save({&a}).ok());
      const std::string old = read_file(dir.path() / "tenants.json");
      StepFileOps ops;
      ops.set_write_chunk(64);
      StateStore store(dir.path(), ops);
      ops.arm(step, StepFileOps::Action::kFail, error);
      const Status saved = store.save({&a, &b});
      if (ops.steps() < step) {  // the save finished before the failing step: done
        EXPECT_TRUE(saved.ok());
        break;
      }
      const bool renamed = read_file(dir.path() / "tenants.json") != old;
      if (saved.ok()) {
        EXPECT_TRUE(renamed) << "step " << step;  // only the directory fsync may fail quietly
      } else {
        ++failures;
        EXPECT_NE(saved.error().find(std::strerror(error)), std::string::npos) << saved.error();
        EXPECT_FALSE(renamed) << "step " << step;
      }
      EXPECT_FALSE(std::filesystem::exists(dir.path() / "tenants.json.tmp")) << "step " << step;
    }
  }
  EXPECT_GT(failures, 10);
}

TEST(CrashConsistency, AFullDiskFailsTheAdminChangeAndKeepsMemoryAsItWas) {
  TempDir dir;
  StepFileOps ops;
  RegistryConfig config{dir.path() / "run", dir.path() / "state", 0};
  config.file_ops = &ops;
  const GpuInventory gpus = one_gpu();  // the registry keeps a reference
  TenantRegistry registry(config, gpus);
  ASSERT_TRUE(registry.prepare().ok());
  ASSERT_TRUE(
      registry.create(json{{"name", "a"}, {"devices", {{{"gpu", 0}, {"memory_limit", kGiB}}}}})
          .ok());
  const std::string old = read_file(config.state_dir / "tenants.json");

  ops.arm(2, StepFileOps::Action::kFail, ENOSPC);  // the first write of the new file
  auto created =
      registry.create(json{{"name", "b"}, {"devices", {{{"gpu", 0}, {"memory_limit", kGiB}}}}});
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.error().find("No space left on device"), std::string::npos) << created.error();
  EXPECT_EQ(registry.find("b"), nullptr);
  EXPECT_FALSE(std::filesystem::exists(config.run_dir / "pods" / "b"));

  ops.arm(2, StepFileOps::Action::kFail, ENOSPC);
  auto updated =
      registry.update(json{{"name", "a"}, {"devices", {{{"gpu", 0}, {"memory_limit", 2 * kGiB}}}}});
  ASSERT_FALSE(updated.ok());
  EXPECT_EQ(registry.find("a")->spec.devices[0].memory_limit, kGiB);
  EXPECT_EQ(registry.find("a")->quota().devices[0].memory_limit.load(), kGiB);

  ops.arm(3, StepFileOps::Action::kFail, ENOSPC);  // the fsync
  ASSERT_FALSE(registry.remove("a").ok());
  EXPECT_NE(registry.find("a"), nullptr);
  EXPECT_TRUE(std::filesystem::exists(config.run_dir / "ledgers" / "a"));
  EXPECT_EQ(read_file(config.state_dir / "tenants.json"), old);
  EXPECT_FALSE(std::filesystem::exists(config.state_dir / "tenants.json.tmp"));

  ops.arm(0, StepFileOps::Action::kFail);  // space again: the same changes go through
  auto retried =
      registry.create(json{{"name", "b"}, {"devices", {{{"gpu", 0}, {"memory_limit", kGiB}}}}});
  EXPECT_TRUE(retried.ok()) << retried.error();
}

}  // namespace
}  // namespace fracgpu::broker
