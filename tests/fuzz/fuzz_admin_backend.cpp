// FuzzAdminBackend and the registry invariants (see fuzz_admin_backend.h).
#include "fuzz_admin_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/admission.h"
#include "core/state_store.h"
#include "core/status_report.h"
#include "fuzz_support.h"

namespace fracgpu::fuzz {
namespace {

using broker::Result;
using broker::TenantSpec;
using nlohmann::json;

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

std::vector<TenantSpec> by_name(std::vector<TenantSpec> specs) {
  std::sort(specs.begin(), specs.end(),
            [](const TenantSpec& a, const TenantSpec& b) { return a.name < b.name; });
  return specs;
}

// The persisted form of a spec reads back as the same spec.
void check_round_trip(const TenantSpec& spec) {
  const json persisted = broker::tenant_spec_to_json(spec);
  auto again = broker::tenant_spec_from_json(persisted);
  FUZZ_CHECK(again.ok(), "tenant " + spec.name + " persists as " + persisted.dump() +
                             ", which does not read back: " + again.error());
  FUZZ_CHECK(*again == spec,
             "tenant " + spec.name + " reads back changed from " + persisted.dump());
}

void check_published(const broker::Tenant& tenant) {
  const TenantSpec& spec = tenant.spec;
  const TenantQuota& quota = tenant.segments->quota();
  const std::string who = "tenant " + spec.name;
  FUZZ_CHECK(quota_layout_ok(quota, sizeof quota), who + ": its quota has a bad header");
  FUZZ_CHECK(quota.device_count == spec.devices.size(), who + ": device_count");
  for (std::size_t i = 0; i < spec.devices.size() && i < kMaxDevices; ++i) {
    const broker::DeviceSpec& d = spec.devices[i];
    const DeviceQuota& q = quota.devices[i];
    const std::string where = who + " device " + std::to_string(i) + ": ";
    FUZZ_CHECK(q.present == 1 && q.host_index == d.gpu, where + "not published on its GPU");
    FUZZ_CHECK(q.memory_limit.load() == d.memory_limit, where + "memory_limit differs");
    FUZZ_CHECK(q.memory_request.load() == d.memory_request, where + "memory_request differs");
    FUZZ_CHECK(q.memory_grant.load() >= d.memory_request && q.memory_grant.load() <= d.memory_limit,
               where + "grant " + std::to_string(q.memory_grant.load()) + " outside [request " +
                   std::to_string(d.memory_request) + ", limit " + std::to_string(d.memory_limit) +
                   "]");
    FUZZ_CHECK(
        q.compute_weight.load() == d.compute && q.compute_ceiling_pct.load() == d.compute_limit,
        where + "compute differs");
    FUZZ_CHECK(q.priority.load() == static_cast<uint32_t>(d.priority), where + "priority differs");
  }
}

}  // namespace

broker::GpuInventory simulated_gpus() {
  broker::GpuInventory gpus;
  gpus.driver_path = "simulated";
  gpus.gpus.push_back(
      {0, "GPU-66726163-6770-7566-757a-7a0000000000", "simulated", 16 * kGiB, 64 * kMiB});
  gpus.gpus.push_back(
      {1, "GPU-66726163-6770-7566-757a-7a0000000001", "simulated", 80 * kGiB, 512 * kMiB});
  return gpus;
}

int NoSyncFileOps::open(const char* path, int flags, mode_t mode) {
  return ::open(path, flags, mode);
}
ssize_t NoSyncFileOps::write(int fd, const void* data, size_t size) {
  return ::write(fd, data, size);
}
int NoSyncFileOps::close(int fd) {
  return ::close(fd);
}
int NoSyncFileOps::rename(const char* from, const char* to) {
  return std::rename(from, to);
}
int NoSyncFileOps::unlink(const char* path) {
  return ::unlink(path);
}

NoSyncFileOps& no_sync_file_ops() {
  static NoSyncFileOps ops;
  return ops;
}

void check_admitted(broker::TenantRegistry& registry, uint64_t reserve) {
  const broker::GpuInventory& gpus = registry.gpus();
  std::map<uint32_t, unsigned __int128> guaranteed;
  for (broker::Tenant* t : registry.all()) {
    const TenantSpec& spec = t->spec;
    FUZZ_CHECK(broker::validate_tenant_name(spec.name).ok(), "served tenant name " + spec.name);
    FUZZ_CHECK(!spec.devices.empty() && spec.devices.size() <= kMaxDevices,
               "tenant " + spec.name + " has " + std::to_string(spec.devices.size()) + " devices");
    check_round_trip(spec);
    check_published(*t);
    for (const broker::DeviceSpec& d : spec.devices) {
      const broker::GpuInfo* gpu = gpus.find(d.gpu);
      if (gpu == nullptr) continue;  // restored with a GPU gone: kept, not admitted there
      const uint64_t cap = broker::gpu_capacity(*gpu, reserve);
      const std::string where = "tenant " + spec.name + " on GPU " + std::to_string(d.gpu) + ": ";
      FUZZ_CHECK(d.memory_limit >= 1 && d.memory_limit <= cap,
                 where + "limit " + std::to_string(d.memory_limit) + " outside [1, capacity " +
                     std::to_string(cap) + "]");
      FUZZ_CHECK(d.memory_request <= d.memory_limit, where + "request above the limit");
      guaranteed[d.gpu] += d.memory_request;
    }
  }
  for (const auto& [gpu, sum] : guaranteed) {
    const uint64_t cap = broker::gpu_capacity(*gpus.find(gpu), reserve);
    FUZZ_CHECK(sum <= cap, "GPU " + std::to_string(gpu) + ": more memory guaranteed than it has");
  }
}

FuzzAdminBackend::FuzzAdminBackend(const std::filesystem::path& root)
    : run_dir_(root / "run"), state_dir_(root / "state"), gpus_(simulated_gpus()) {
  registry_ = std::make_unique<broker::TenantRegistry>(
      broker::RegistryConfig{run_dir_, state_dir_, kFuzzReserve, &no_sync_file_ops()}, gpus_);
  if (auto s = registry_->prepare(); !s)
    fail("cannot lay out " + run_dir_.string() + ": " + s.error());
}

Result<json> FuzzAdminBackend::create_tenant(const json& tenant) {
  auto created = registry_->create(tenant);
  if (!created) return Result<json>::failure(created.error());
  return broker::tenant_status_json(**created);
}

Result<json> FuzzAdminBackend::update_tenant(const json& tenant) {
  auto updated = registry_->update(tenant);
  if (!updated) return Result<json>::failure(updated.error());
  return broker::tenant_status_json(**updated);
}

broker::Status FuzzAdminBackend::delete_tenant(const std::string& name) {
  return registry_->remove(name);
}

json FuzzAdminBackend::list_tenants() {
  json list = json::array();
  for (broker::Tenant* t : registry_->all()) list.push_back(broker::tenant_status_json(*t));
  for (auto& q : registry_->quarantined_json()) list.push_back(std::move(q));
  return list;
}

json FuzzAdminBackend::list_gpus() {
  return broker::gpus_json(gpus_, kFuzzReserve);
}

void FuzzAdminBackend::reset() {
  std::vector<std::string> names;
  for (broker::Tenant* t : registry_->all()) names.push_back(t->spec.name);
  for (const std::string& name : names) {
    if (auto s = registry_->remove(name); !s)
      fail("cannot delete tenant " + name + ": " + s.error());
  }
}

void FuzzAdminBackend::check_books() {
  check_admitted(*registry_, kFuzzReserve);
  std::vector<TenantSpec> served;
  for (broker::Tenant* t : registry_->all()) served.push_back(t->spec);
  auto stored = broker::StateStore(state_dir_, no_sync_file_ops()).load();
  FUZZ_CHECK(stored.ok(), "tenants.json does not load: " + stored.error());
  FUZZ_CHECK(stored->invalid.empty(), "tenants.json holds an entry the broker cannot read back: " +
                                          stored->invalid.front().reason);
  FUZZ_CHECK(by_name(stored->specs) == by_name(served),
             "tenants.json does not hold the tenants served");
}

}  // namespace fracgpu::fuzz
