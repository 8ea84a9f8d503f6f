// Persistence of tenant definitions in <state-dir>/tenants.json, so that a restarted
// broker (even one killed with SIGKILL) re-creates every tenant with its caps. Writes
// are atomic: a temporary file is written, fsynced and renamed over the old one, so a
// crash leaves either the old or the new list, never a torn one.
#pragma once

#include <filesystem>
#include <vector>

#include "common/result.h"
#include "core/tenant_spec.h"

namespace fracgpu::broker {

class StateStore {
 public:
  explicit StateStore(std::filesystem::path state_dir) : dir_(std::move(state_dir)) {}

  std::filesystem::path file() const { return dir_ / "tenants.json"; }

  // Creates the state directory if needed.
  Status prepare() const;

  // The persisted tenants. A missing file is an empty list; an unreadable one is moved
  // aside (tenants.json.bad) and reported, entries that fail validation are skipped
  // with an error log — the broker starts in every case.
  std::vector<TenantSpec> load() const;

  Status save(const std::vector<const TenantSpec*>& tenants) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace fracgpu::broker
