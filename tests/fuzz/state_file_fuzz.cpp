// Fuzzer of the state file: the input is <state-dir>/tenants.json as a restarting broker
// finds it. StateStore::load reads it strictly (a file that is not a whole tenant list
// is refused; each entry is validated on its own, bad ones returned verbatim), and
// TenantRegistry::restore (--keep-going) then re-admits every entry against the ones
// before it, quarantines what fails (backing the file up first) and re-attaches the
// rest: quota and ledger files on two simulated GPUs. Checked, besides never throwing:
//  load     a file that loads re-serialises (StateStore::save: the valid specs, then the
//           bad entries verbatim) and loads again to the same specs and the same bad entries;
//  restore  every restored tenant admitted within its GPUs and published as defined
//           (fuzz_admin_backend.h, check_admitted), every entry either restored or listed
//           as quarantined, and what a later save writes loads back as that list.
// Seeds: corpus/state_file/ (files written by brokers, old and damaged ones).
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/state_store.h"
#include "core/tenant_registry.h"
#include "fuzz_admin_backend.h"
#include "fuzz_support.h"

namespace {

using namespace fracgpu;
using broker::StateStore;
using broker::StoredTenants;

const std::filesystem::path& state_dir() {
  static const std::filesystem::path dir = fuzz::scratch_dir() / "state";
  return dir;
}
const std::filesystem::path& resaved_dir() {
  static const std::filesystem::path dir = fuzz::scratch_dir() / "resaved";
  return dir;
}
const std::filesystem::path& run_dir() {
  static const std::filesystem::path dir = fuzz::scratch_dir() / "run";
  return dir;
}

const broker::GpuInventory& gpus() {
  static const broker::GpuInventory inventory =
      fuzz::simulated_gpus();  // the registry keeps a reference
  return inventory;
}

void fresh_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) fuzz::fail("cannot create " + dir.string() + ": " + ec.message());
}

std::vector<nlohmann::json> entries_of(const std::vector<broker::InvalidTenantEntry>& invalid) {
  std::vector<nlohmann::json> out;
  for (const auto& e : invalid) out.push_back(e.entry);
  return out;
}

// load -> save -> load gives what the first load gave.
void check_resave(const StoredTenants& first) {
  fresh_directory(resaved_dir());
  const StateStore store(resaved_dir(), fuzz::no_sync_file_ops());
  std::vector<const broker::TenantSpec*> specs;
  for (const auto& s : first.specs) specs.push_back(&s);
  if (auto s = store.save(specs, first.invalid); !s) fuzz::fail("cannot save: " + s.error());
  auto second = store.load();
  FUZZ_CHECK(second.ok(), "a re-saved tenant list does not load: " + second.error());
  FUZZ_CHECK(second->specs == first.specs,
             "the re-saved tenants read back differently (" + std::to_string(second->specs.size()) +
                 " valid of " + std::to_string(first.specs.size()) + ")" +
                 (second->invalid.size() > first.invalid.size()
                      ? "; now refused: " + second->invalid.back().reason
                      : std::string()));
  FUZZ_CHECK(entries_of(second->invalid) == entries_of(first.invalid),
             "the bad entries were not written back verbatim");
}

void check_restore(const StoredTenants& stored) {
  fresh_directory(run_dir());
  broker::TenantRegistry registry(
      broker::RegistryConfig{run_dir(), state_dir(), fuzz::kFuzzReserve, &fuzz::no_sync_file_ops()},
      gpus());
  if (auto s = registry.prepare(); !s) fuzz::fail("cannot prepare: " + s.error());
  auto restored = registry.restore(broker::RestoreOptions{.keep_going = true});
  FUZZ_CHECK(restored.ok(), "restore with --keep-going failed: " + restored.error());
  fuzz::check_admitted(registry, fuzz::kFuzzReserve);
  FUZZ_CHECK(
      *restored + registry.quarantined().size() == stored.specs.size() + stored.invalid.size(),
      "an entry was neither restored nor quarantined");
  // A later save (what any admin change makes: the served tenants and the quarantined
  // entries; a replacement that names no tenant replaces nothing).
  auto unchanged = StateStore(state_dir(), fuzz::no_sync_file_ops()).load();
  FUZZ_CHECK(unchanged.ok(), "tenants.json changed under restore: " + unchanged.error());
  if (auto s = registry.persist_replacing(broker::TenantSpec{}); !s)
    fuzz::fail("cannot save: " + s.error());
  auto after = StateStore(state_dir(), fuzz::no_sync_file_ops()).load();
  FUZZ_CHECK(after.ok(), "what the registry saved does not load: " + after.error());
  FUZZ_CHECK(
      after->specs.size() + after->invalid.size() == *restored + registry.quarantined().size(),
      "the saved list does not hold every restored and quarantined tenant");
  for (broker::Tenant* t : registry.all()) {
    FUZZ_CHECK(std::find(after->specs.begin(), after->specs.end(), t->spec) != after->specs.end(),
               "restored tenant " + t->spec.name + " is not saved as it is served");
  }
  // Quarantined entries are kept verbatim: as read, valid (refused by admission) or not.
  std::vector<nlohmann::json> saved = after->entries;
  for (const auto& e : after->invalid) saved.push_back(e.entry);
  for (const auto& q : registry.quarantined()) {
    FUZZ_CHECK(std::find(saved.begin(), saved.end(), q.entry) != saved.end(),
               "quarantined entry " + q.name + " was not kept verbatim");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    fresh_directory(state_dir());
    fuzz::write_file(state_dir() / "tenants.json", fuzz::as_text(data, size));
    auto stored = StateStore(state_dir(), fuzz::no_sync_file_ops()).load();
    if (!stored) {
      FUZZ_CHECK(!stored.error().empty(), "a refusal without its sentence");
      return 0;
    }
    check_resave(*stored);
    check_restore(*stored);
  } catch (const std::exception& e) {
    fuzz::fail(std::string("loading tenants.json threw: ") + e.what());
  }
  return 0;
}
