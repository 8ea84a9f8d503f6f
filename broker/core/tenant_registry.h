// The broker's tenants: their definitions, run directories and mapped segments, kept
// consistent with tenants.json. Create/update/delete go through admission and are
// persisted before they take effect; restore() brings back the persisted tenants
// after a restart, re-opening (never resetting) their live ledgers. A persisted tenant
// is never dropped silently: every entry is validated and re-admitted before anything is
// applied, and one that fails either stops the start (naming the tenant and the field)
// or, with keep_going, is quarantined: not applied, listed with its reason, and written
// back verbatim on every later save, with a timestamped backup of the file taken first. It also
// owns the run directory's layout and modes (fracgpu/paths.h), and moves the files of the old
// layout (every tenant under tenants/, the ledger beside the quota) into it. Sockets and
// process watches are the Broker's business, not the registry's; the socket's mode and
// owner are decided here (socket_access) because they follow the tenant's owners.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "core/gpu_inventory.h"
#include "core/memory_arbiter.h"
#include "core/outside_usage.h"
#include "core/state_store.h"
#include "core/tenant_segments.h"
#include "core/tenant_spec.h"

namespace fracgpu::broker {

struct Tenant {
  TenantSpec spec;
  std::filesystem::path dir;          // <run-dir>/tenants/<name> (owners) or <run-dir>/pods/<name>
  std::filesystem::path ledger_path;  // <run-dir>/ledgers/<name>
  std::unique_ptr<TenantSegments> segments;

  std::filesystem::path socket_path() const;
  TenantQuota& quota() { return segments->quota(); }
  TenantLedger& ledger() { return segments->ledger(); }
};

// The tenant socket's file mode and owner: its one owner's, 0600, where the broker can
// give it away (root, or the owner is the broker's uid); else the broker's, 0666, and
// the uid check at accept (TenantSocketServer) is what keeps other uids out.
struct SocketAccess {
  mode_t mode = 0;
  uid_t owner = 0;  // always given, so that an update from one owner to several gives it back
};
SocketAccess socket_access(const TenantSpec& spec);

struct RegistryConfig {
  std::filesystem::path run_dir;
  std::filesystem::path state_dir;
  uint64_t reserve = 0;         // bytes per GPU kept out of every quota
  FileOps* file_ops = nullptr;  // the state store's file-system port; null = POSIX (tests set it)
};

struct RestoreOptions {
  // false: any tenant that cannot be restored as it was stops the start (restore fails);
  // true (--keep-going): such tenants are quarantined and the broker starts.
  bool keep_going = false;
};

class TenantRegistry {
 public:
  TenantRegistry(RegistryConfig config, const GpuInventory& gpus);

  // Creates the run directory's layout with its modes (and fixes those of an existing
  // one), and the state directory.
  Status prepare();
  // Loads tenants.json, validates and re-admits every entry (against the entries before
  // it), then re-attaches every tenant's files; returns how many were restored. Fails,
  // with every problem named, unless options.keep_going; tenants.json is never changed.
  Result<std::size_t> restore(const RestoreOptions& options);
  // restore({.keep_going = true}): quarantines rather than refusing to start.
  std::size_t restore();

  Result<Tenant*> create(const nlohmann::json& tenant_json);
  Result<Tenant*> update(const nlohmann::json& tenant_json);
  Status remove(std::string_view name);  // also deletes a quarantined entry
  // Persists the tenant list with `replacement` in place of its namesake (for changes
  // that need no admission, e.g. a pod identity); quarantined entries are kept.
  Status persist_replacing(const TenantSpec& replacement) const;

  const std::vector<InvalidTenantEntry>& quarantined() const { return quarantined_; }
  // [{"name", "quarantined": true, "reason"}...] for the admin "list".
  nlohmann::json quarantined_json() const;

  Tenant* find(std::string_view name);
  std::vector<Tenant*> all();
  // Valid until the next create, remove or restore.
  const std::vector<ArbiterMember>& arbiter_members();
  const GpuInventory& gpus() const { return gpus_; }
  const RegistryConfig& config() const { return config_; }
  // Memory outside every tenant (outside_usage.h): create and update refuse a request
  // made or raised that does not fit beside it. Restores are not checked against it.
  void set_outside(const OutsideBooks* outside) { outside_ = outside; }

 private:
  std::filesystem::path tenant_dir(const TenantSpec& spec) const;
  std::filesystem::path ledger_path(std::string_view name) const;
  void move_old_layout_dir(const TenantSpec& spec) const;
  void remove_files(const TenantSpec& spec) const;
  std::vector<const TenantSpec*> specs_except(std::string_view name) const;
  Status persist_with(const TenantSpec* replacement, const TenantSpec* added,
                      std::string_view removed) const;
  Result<std::unique_ptr<Tenant>> attach(const TenantSpec& spec);
  const InvalidTenantEntry* find_quarantined(std::string_view name) const;
  Status admit_restored(const TenantSpec& spec, const std::vector<const TenantSpec*>& before) const;
  void quarantine(std::vector<InvalidTenantEntry> entries, bool& backed_up);

  RegistryConfig config_;
  const GpuInventory& gpus_;
  StateStore store_;
  std::map<std::string, std::unique_ptr<Tenant>, std::less<>> tenants_;
  uint64_t generation_ = 0;  // bumped whenever a tenant comes or goes
  std::vector<Tenant*> all_cache_;
  uint64_t all_generation_ = ~uint64_t{0};
  std::vector<ArbiterMember> members_cache_;
  uint64_t members_generation_ = ~uint64_t{0};
  std::vector<InvalidTenantEntry> quarantined_;
  const OutsideBooks* outside_ = nullptr;
};

}  // namespace fracgpu::broker
