// The admin socket's backend for fuzzing: a real TenantRegistry (tenant definitions,
// admission, quota and ledger files, tenants.json) over two simulated GPUs in a scratch
// run and state directory, answering create/update/delete/list/gpus as the Broker does
// (broker.cpp) minus what needs a running daemon: tenant sockets, process watches, the
// compute scheduler and the audit. check_books() holds the registry to its promises:
// every tenant admitted within its GPUs, published as defined, and tenants.json
// holding exactly the tenants served. Cost per request: the registry's own (a few file
// operations; fsync is skipped, which changes nothing the fuzzers look at).
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/admin_server.h"
#include "core/file_ops.h"
#include "core/gpu_inventory.h"
#include "core/tenant_registry.h"

namespace fracgpu::fuzz {

// GPU 0: 16 GiB, 64 MiB per context; GPU 1: 80 GiB, 512 MiB per context.
broker::GpuInventory simulated_gpus();
inline constexpr uint64_t kFuzzReserve = 256ull << 20;  // --reserve of the fuzzed broker

// The state store's file port without fsync (FileOps, file_ops.h).
class NoSyncFileOps final : public broker::FileOps {
 public:
  int open(const char* path, int flags, mode_t mode) override;
  ssize_t write(int fd, const void* data, size_t size) override;
  int fsync(int) override { return 0; }
  int close(int fd) override;
  int rename(const char* from, const char* to) override;
  int unlink(const char* path) override;
};
NoSyncFileOps& no_sync_file_ops();

class FuzzAdminBackend final : public broker::AdminBackend {
 public:
  // Lays out <root>/run and <root>/state (TenantRegistry::prepare).
  explicit FuzzAdminBackend(const std::filesystem::path& root);

  broker::Result<nlohmann::json> create_tenant(const nlohmann::json& tenant) override;
  broker::Result<nlohmann::json> update_tenant(const nlohmann::json& tenant) override;
  broker::Status delete_tenant(const std::string& name) override;
  nlohmann::json list_tenants() override;
  nlohmann::json list_gpus() override;
  std::string gpu_problem() override { return gpus_.problem; }

  // Deletes every tenant, so that each input starts from an empty node.
  void reset();
  // The invariants described above; fail()s when one is broken.
  void check_books();

  broker::TenantRegistry& registry() { return *registry_; }
  const broker::GpuInventory& gpus() const { return gpus_; }
  const std::filesystem::path& run_dir() const { return run_dir_; }
  const std::filesystem::path& state_dir() const { return state_dir_; }

 private:
  std::filesystem::path run_dir_, state_dir_;
  broker::GpuInventory gpus_;
  std::unique_ptr<broker::TenantRegistry> registry_;
};

// The admission and publication invariants of one registry's tenants (check_books
// without the state file), for fuzzers that build registries of their own.
void check_admitted(broker::TenantRegistry& registry, uint64_t reserve);

}  // namespace fracgpu::fuzz
