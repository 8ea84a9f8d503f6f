// Persistence of tenant definitions in <state-dir>/tenants.json, so that a restarted
// broker (even one killed with SIGKILL) re-creates every tenant with its caps.
//
// Writes are crash-consistent: the new list goes to tenants.json.tmp, which is written,
// fsynced, closed and renamed over tenants.json, and then the directory is fsynced; a
// crash at any step leaves either the old or the new list, never a torn one, and a
// failed step (a full disk) leaves the old file as it was and is reported to the caller.
// Every file-system call goes through a FileOps port (file_ops.h) so that tests can
// crash or fail a save after each step.
//
// Reading is strict and whole-file: a file that is not a complete tenant list is a
// failure (the caller decides whether the broker may start), and an entry that fails
// validation is returned as an InvalidTenantEntry, kept verbatim, so that a later save
// writes it back unchanged rather than erasing it. Nothing is on a hot path.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/file_ops.h"
#include "core/tenant_spec.h"

namespace fracgpu::broker {

// An entry of tenants.json that the broker does not apply (quarantined): written back
// exactly as it was read on every save, so that an admin can fix it in place.
struct InvalidTenantEntry {
  std::string name;      // its "name" when that is a string, else "entry N"
  nlohmann::json entry;  // as read
  std::string reason;    // names the tenant and the field (or the admission rule)
};

struct StoredTenants {
  std::vector<TenantSpec> specs;            // valid entries, in file order
  std::vector<nlohmann::json> entries;      // entries[i]: specs[i] as read
  std::vector<InvalidTenantEntry> invalid;  // entries that failed validation
};

class StateStore {
 public:
  explicit StateStore(std::filesystem::path state_dir, FileOps& ops = posix_file_ops())
      : dir_(std::move(state_dir)), ops_(&ops) {}

  std::filesystem::path file() const { return dir_ / "tenants.json"; }
  std::filesystem::path temporary_file() const { return dir_ / "tenants.json.tmp"; }

  // Creates the state directory if needed.
  Status prepare() const;

  // The persisted tenants. A missing file is an empty list; a tenants.json.tmp left by a
  // save that never completed is removed (the rename never happened, so tenants.json is
  // the last list a caller was told was saved). Fails, naming the file, when the file
  // cannot be read or is not a whole tenant list (empty, truncated, not JSON, another
  // version); the file is left untouched.
  Result<StoredTenants> load() const;

  Status save(const std::vector<const TenantSpec*>& tenants) const { return save(tenants, {}); }
  // The valid tenants followed by the quarantined entries, verbatim.
  Status save(const std::vector<const TenantSpec*>& tenants,
              const std::vector<InvalidTenantEntry>& kept) const;

  // Copies tenants.json, as it is, to tenants.json.<UTC time>.bak beside it (written the
  // same crash-consistent way) and returns the copy's path.
  Result<std::filesystem::path> backup() const;

 private:
  Status write_atomically(const std::filesystem::path& target, const std::string& text) const;
  Status write_file(const std::filesystem::path& path, const std::string& text) const;

  std::filesystem::path dir_;
  FileOps* ops_;
};

}  // namespace fracgpu::broker
