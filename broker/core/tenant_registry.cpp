// TenantRegistry: admission, persistence and the on-disk layout of tenants. Every
// mutation writes the complete new tenant list to tenants.json first and changes the
// in-memory state and the quota files only once that write succeeded, so memory and
// disk never disagree about which tenants exist.
#include "core/tenant_registry.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "core/admission.h"
#include "fracgpu/paths.h"

namespace fracgpu::broker {
namespace {

Status make_directory(const std::filesystem::path& dir, mode_t mode) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::failure("cannot create " + dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), mode);  // explicit: the umask must not decide who may connect
  return {};
}

Status check_socket_path(const std::filesystem::path& path) {
  if (path.native().size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Status::failure("the tenant socket path " + path.string() + " is longer than the " +
                           std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                           " bytes a Unix socket allows; use a shorter --run-dir or tenant name");
  }
  return {};
}

}  // namespace

std::filesystem::path Tenant::socket_path() const {
  return dir / paths::kTenantSocketName;
}

TenantRegistry::TenantRegistry(RegistryConfig config, const GpuInventory& gpus)
    : config_(std::move(config)), gpus_(gpus), store_(config_.state_dir) {}

Status TenantRegistry::prepare() {
  if (auto s = make_directory(config_.run_dir, 0755); !s) return s;
  if (auto s = make_directory(config_.run_dir / paths::kTenantsDirName, 0755); !s) return s;
  return store_.prepare();
}

std::filesystem::path TenantRegistry::tenant_dir(std::string_view name) const {
  return config_.run_dir / paths::kTenantsDirName / std::string(name);
}

std::vector<const TenantSpec*> TenantRegistry::specs_except(std::string_view name) const {
  std::vector<const TenantSpec*> out;
  for (const auto& [n, t] : tenants_) {
    if (n != name) out.push_back(&t->spec);
  }
  return out;
}

Status TenantRegistry::persist_with(const TenantSpec* replacement, const TenantSpec* added,
                                    std::string_view removed) const {
  std::vector<const TenantSpec*> list;
  for (const auto& [n, t] : tenants_) {
    if (n == removed) continue;
    list.push_back(replacement != nullptr && replacement->name == n ? replacement : &t->spec);
  }
  if (added != nullptr) list.push_back(added);
  return store_.save(list);
}

Result<std::unique_ptr<Tenant>> TenantRegistry::attach(const TenantSpec& spec) {
  using R = Result<std::unique_ptr<Tenant>>;
  auto tenant = std::make_unique<Tenant>();
  tenant->spec = spec;
  tenant->dir = tenant_dir(spec.name);
  if (auto s = check_socket_path(tenant->socket_path()); !s) return R::failure(s.error());
  if (auto s = make_directory(tenant->dir, 0755); !s) return R::failure(s.error());
  auto segments = TenantSegments::open(tenant->dir);
  if (!segments) return R::failure(segments.error());
  tenant->segments = std::move(*segments);
  tenant->segments->publish(spec, gpus_);
  return R(std::move(tenant));
}

std::size_t TenantRegistry::restore() {
  for (TenantSpec& spec : store_.load()) {
    for (const DeviceSpec& d : spec.devices) {
      const GpuInfo* gpu = gpus_.find(d.gpu);
      if (gpu == nullptr || (!d.uuid.empty() && gpu->uuid != d.uuid)) {
        spdlog::warn(
            "tenant {}: GPU {} ({}) is not on this node as it was when the tenant was created",
            spec.name, d.gpu, d.uuid);
      }
    }
    auto tenant = attach(spec);
    if (!tenant) {
      spdlog::error("cannot restore tenant {}: {}", spec.name, tenant.error());
      continue;
    }
    spdlog::info("restored tenant {} (ledger {})", spec.name,
                 (*tenant)->segments->ledger_reused() ? "re-attached" : "new");
    tenants_.emplace(spec.name, std::move(*tenant));
  }
  return tenants_.size();
}

Result<Tenant*> TenantRegistry::create(const nlohmann::json& tenant_json) {
  auto spec = tenant_spec_from_json(tenant_json);
  if (!spec) return Result<Tenant*>::failure(spec.error());
  if (find(spec->name))
    return Result<Tenant*>::failure("tenant '" + spec->name + "' already exists");
  if (auto s = admit_tenant(*spec, gpus_, config_.reserve, specs_except(spec->name)); !s) {
    return Result<Tenant*>::failure(s.error());
  }
  std::error_code ec;
  std::filesystem::remove_all(tenant_dir(spec->name),
                              ec);  // leftovers of a tenant deleted while we were down
  auto tenant = attach(*spec);
  if (!tenant) return Result<Tenant*>::failure(tenant.error());
  if (auto s = persist_with(nullptr, &*spec, {}); !s) {
    std::filesystem::remove_all((*tenant)->dir, ec);
    return Result<Tenant*>::failure(s.error());
  }
  Tenant* raw = tenant->get();
  tenants_.emplace(spec->name, std::move(*tenant));
  return raw;
}

Result<Tenant*> TenantRegistry::update(const nlohmann::json& tenant_json) {
  if (!tenant_json.is_object() || !tenant_json.contains("name") ||
      !tenant_json["name"].is_string()) {
    return Result<Tenant*>::failure("\"tenant\" must be an object with a \"name\"");
  }
  Tenant* tenant = find(tenant_json["name"].get<std::string>());
  if (tenant == nullptr) {
    return Result<Tenant*>::failure("no tenant named '" +
                                    tenant_json["name"].get<std::string>().substr(0, 80) + "'");
  }
  auto spec = apply_tenant_update(tenant->spec, tenant_json);
  if (!spec) return Result<Tenant*>::failure(spec.error());
  if (auto s = admit_tenant(*spec, gpus_, config_.reserve, specs_except(spec->name)); !s) {
    return Result<Tenant*>::failure(s.error());
  }
  if (auto s = persist_with(&*spec, nullptr, {}); !s) return Result<Tenant*>::failure(s.error());
  tenant->spec = std::move(*spec);
  tenant->segments->publish(tenant->spec, gpus_);
  return tenant;
}

Status TenantRegistry::remove(std::string_view name) {
  auto it = tenants_.find(name);
  if (it == tenants_.end())
    return Status::failure("no tenant named '" + std::string(name.substr(0, 80)) + "'");
  if (auto s = persist_with(nullptr, nullptr, name); !s) return s;
  const std::filesystem::path dir = it->second->dir;
  tenants_.erase(it);  // unmaps the segments
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec)
    spdlog::warn("tenant {} deleted, but removing {} failed: {}", name, dir.string(), ec.message());
  return {};
}

Tenant* TenantRegistry::find(std::string_view name) {
  auto it = tenants_.find(name);
  return it == tenants_.end() ? nullptr : it->second.get();
}

std::vector<Tenant*> TenantRegistry::all() {
  std::vector<Tenant*> out;
  for (auto& [n, t] : tenants_) out.push_back(t.get());
  return out;
}

std::vector<ArbiterMember> TenantRegistry::arbiter_members() {
  std::vector<ArbiterMember> out;
  for (auto& [n, t] : tenants_) out.push_back({n, &t->quota(), &t->ledger()});
  return out;
}

}  // namespace fracgpu::broker
