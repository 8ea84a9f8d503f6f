// The broker's tenants: their definitions, run directories and mapped segments, kept
// consistent with tenants.json. Create/update/delete go through admission and are
// persisted before they take effect; restore() brings back the persisted tenants
// after a restart, re-opening (never resetting) their live ledgers. Sockets and
// process watches are the Broker's business, not the registry's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "core/gpu_inventory.h"
#include "core/memory_arbiter.h"
#include "core/state_store.h"
#include "core/tenant_segments.h"
#include "core/tenant_spec.h"

namespace fracgpu::broker {

struct Tenant {
  TenantSpec spec;
  std::filesystem::path dir;  // <run-dir>/tenants/<name>
  std::unique_ptr<TenantSegments> segments;

  std::filesystem::path socket_path() const;
  TenantQuota& quota() { return segments->quota(); }
  TenantLedger& ledger() { return segments->ledger(); }
};

struct RegistryConfig {
  std::filesystem::path run_dir;
  std::filesystem::path state_dir;
  uint64_t reserve = 0;  // bytes per GPU kept out of every quota
};

class TenantRegistry {
 public:
  TenantRegistry(RegistryConfig config, const GpuInventory& gpus);

  // Creates <run-dir>/tenants and the state directory.
  Status prepare();
  // Loads tenants.json and re-attaches every tenant's files; returns how many.
  std::size_t restore();

  Result<Tenant*> create(const nlohmann::json& tenant_json);
  Result<Tenant*> update(const nlohmann::json& tenant_json);
  Status remove(std::string_view name);

  Tenant* find(std::string_view name);
  std::vector<Tenant*> all();
  std::vector<ArbiterMember> arbiter_members();
  const GpuInventory& gpus() const { return gpus_; }
  const RegistryConfig& config() const { return config_; }

 private:
  std::filesystem::path tenant_dir(std::string_view name) const;
  std::vector<const TenantSpec*> specs_except(std::string_view name) const;
  Status persist_with(const TenantSpec* replacement, const TenantSpec* added,
                      std::string_view removed) const;
  Result<std::unique_ptr<Tenant>> attach(const TenantSpec& spec);

  RegistryConfig config_;
  const GpuInventory& gpus_;
  StateStore store_;
  std::map<std::string, std::unique_ptr<Tenant>, std::less<>> tenants_;
};

}  // namespace fracgpu::broker
