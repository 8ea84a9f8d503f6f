// TenantRegistry: admission, persistence and the on-disk layout of tenants. Every
// mutation writes the complete new tenant list to tenants.json first and changes the
// in-memory state and the quota files only once that write succeeded, so memory and
// disk never disagree about which tenants exist. Directories get their modes by chmod
// after creation (and again on every start, which also repairs an old layout's 0755):
// the umask never decides who may look into the run directory.
#include "core/tenant_registry.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/unix_socket.h"
#include "core/admission.h"
#include "fracgpu/paths.h"

namespace fracgpu::broker {
namespace {

// Creates `dir` (and missing parents) and gives it exactly `mode` and the broker's uid.
// A symbolic link or other non-directory there is refused: the layout's directories are
// what keep tenants out of each other's files.
Status make_directory(const std::filesystem::path& dir, mode_t mode) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::failure("cannot create " + dir.string() + ": " + ec.message());
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Status::failure(dir.string() + " is not a directory");
  if (st.st_uid != ::geteuid() && ::chown(dir.c_str(), ::geteuid(), ::getegid()) != 0) {
    return Status::failure(dir.string() + " belongs to uid " + std::to_string(st.st_uid) +
                           " and cannot be taken over: " + std::strerror(errno));
  }
  if (::chmod(dir.c_str(), mode) != 0)
    return Status::failure("cannot chmod " + dir.string() + ": " + std::strerror(errno));
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

SocketAccess socket_access(const TenantSpec& spec) {
  const uid_t self = ::geteuid();
  if (spec.owners.size() == 1 && (self == 0 || spec.owners[0] == self))
    return {static_cast<mode_t>(paths::kOwnerSocketMode), static_cast<uid_t>(spec.owners[0])};
  return {static_cast<mode_t>(paths::kSharedSocketMode), self};
}

TenantRegistry::TenantRegistry(RegistryConfig config, const GpuInventory& gpus)
    : config_(std::move(config)),
      gpus_(gpus),
      store_(config_.state_dir, config_.file_ops ? *config_.file_ops : posix_file_ops()) {}

Status TenantRegistry::prepare() {
  const std::filesystem::path& run = config_.run_dir;
  if (auto s = make_directory(run, paths::kRunDirMode); !s) return s;
  if (auto s = make_directory(run / paths::kTenantsDirName, paths::kTenantsDirMode); !s) return s;
  if (auto s = make_directory(run / paths::kPodsDirName, paths::kPodsDirMode); !s) return s;
  if (auto s = make_directory(run / paths::kLedgersDirName, paths::kLedgersDirMode); !s) return s;
  return store_.prepare();
}

std::filesystem::path TenantRegistry::tenant_dir(const TenantSpec& spec) const {
  return config_.run_dir / paths::tenant_parent_dir_name(spec.has_owners()) / spec.name;
}

std::filesystem::path TenantRegistry::ledger_path(std::string_view name) const {
  return config_.run_dir / paths::kLedgersDirName / std::string(name);
}

// The old layout kept every tenant under tenants/, where any host user could reach it. A
// tenant without owners belongs under pods/ now: its directory is renamed there (same
// inode, so a pod's bind mount of it and its processes' quota mappings stay attached).
void TenantRegistry::move_old_layout_dir(const TenantSpec& spec) const {
  if (spec.has_owners()) return;
  const std::filesystem::path old = config_.run_dir / paths::kTenantsDirName / spec.name;
  const std::filesystem::path now = tenant_dir(spec);
  struct stat st {};
  if (::lstat(old.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return;
  if (::lstat(now.c_str(), &st) == 0) {
    spdlog::warn("tenant {}: both {} and {} exist; using the second, removing the first", spec.name,
                 old.string(), now.string());
    std::error_code ec;
    std::filesystem::remove_all(old, ec);
    return;
  }
  if (::rename(old.c_str(), now.c_str()) == 0) {
    spdlog::info("tenant {}: moved {} to {} (a tenant without owners)", spec.name, old.string(),
                 now.string());
  } else {
    spdlog::error("tenant {}: cannot move {} to {}: {}", spec.name, old.string(), now.string(),
                  std::strerror(errno));
  }
}

// Everything a tenant of this name may have left on disk, in either layout.
void TenantRegistry::remove_files(const TenantSpec& spec) const {
  std::error_code ec;
  for (const char* parent : {paths::kTenantsDirName, paths::kPodsDirName}) {
    std::filesystem::remove_all(config_.run_dir / parent / spec.name, ec);
    if (ec)
      spdlog::warn("tenant {}: removing its directory under {} failed: {}", spec.name, parent,
                   ec.message());
  }
  std::filesystem::remove(ledger_path(spec.name), ec);
  if (ec) spdlog::warn("tenant {}: removing its ledger failed: {}", spec.name, ec.message());
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
  return store_.save(list, quarantined_);
}

Status TenantRegistry::persist_replacing(const TenantSpec& replacement) const {
  return persist_with(&replacement, nullptr, {});
}

Result<std::unique_ptr<Tenant>> TenantRegistry::attach(const TenantSpec& spec) {
  using R = Result<std::unique_ptr<Tenant>>;
  auto tenant = std::make_unique<Tenant>();
  tenant->spec = spec;
  tenant->dir = tenant_dir(spec);
  tenant->ledger_path = ledger_path(spec.name);
  if (auto s = check_socket_path(tenant->socket_path()); !s) return R::failure(s.error());
  move_old_layout_dir(spec);
  if (auto s = make_directory(tenant->dir, paths::kTenantDirMode); !s) return R::failure(s.error());
  auto segments =
      TenantSegments::open(tenant->dir, tenant->ledger_path,
                           spec.has_owners() ? paths::kOwnedQuotaMode : paths::kQuotaMode);
  if (!segments) return R::failure(segments.error());
  tenant->segments = std::move(*segments);
  tenant->segments->publish(spec, gpus_);
  return R(std::move(tenant));
}

Result<Tenant*> TenantRegistry::create(const nlohmann::json& tenant_json) {
  auto spec = tenant_spec_from_json(tenant_json);
  if (!spec) return Result<Tenant*>::failure(spec.error());
  if (find(spec->name))
    return Result<Tenant*>::failure("tenant '" + spec->name + "' already exists");
  if (const InvalidTenantEntry* q = find_quarantined(spec->name)) {
    return Result<Tenant*>::failure("tenant '" + spec->name + "' exists but is quarantined (" +
                                    q->reason +
                                    "); fix its entry in tenants.json and restart "
                                    "the broker, or delete the tenant first");
  }
  if (auto s = admit_tenant(*spec, gpus_, config_.reserve, specs_except(spec->name)); !s) {
    return Result<Tenant*>::failure(s.error());
  }
  if (outside_ != nullptr) {
    if (auto s = admit_beside_outside(*spec, nullptr, gpus_, config_.reserve,
                                      specs_except(spec->name), *outside_);
        !s)
      return Result<Tenant*>::failure(s.error());
  }
  remove_files(*spec);  // leftovers of a tenant deleted while we were down
  auto tenant = attach(*spec);
  if (!tenant) return Result<Tenant*>::failure(tenant.error());
  if (auto s = persist_with(nullptr, &*spec, {}); !s) {
    (*tenant).reset();  // unmaps the segments
    remove_files(*spec);
    return Result<Tenant*>::failure(s.error());
  }
  Tenant* raw = tenant->get();
  tenants_.emplace(spec->name, std::move(*tenant));
  ++generation_;
  return raw;
}

Result<Tenant*> TenantRegistry::update(const nlohmann::json& tenant_json) {
  if (!tenant_json.is_object() || !tenant_json.contains("name") ||
      !tenant_json["name"].is_string()) {
    return Result<Tenant*>::failure("\"tenant\" must be an object with a \"name\"");
  }
  Tenant* tenant = find(tenant_json["name"].get<std::string>());
  if (const InvalidTenantEntry* q = find_quarantined(tenant_json["name"].get<std::string>())) {
    return Result<Tenant*>::failure("tenant '" + q->name + "' is quarantined (" + q->reason +
                                    "); fix its entry in tenants.json and restart the broker, "
                                    "or delete it and create it again");
  }
  if (tenant == nullptr) {
    return Result<Tenant*>::failure("no tenant named '" +
                                    tenant_json["name"].get<std::string>().substr(0, 80) + "'");
  }
  auto spec = apply_tenant_update(tenant->spec, tenant_json);
  if (!spec) return Result<Tenant*>::failure(spec.error());
  if (auto s = admit_tenant(*spec, gpus_, config_.reserve, specs_except(spec->name)); !s) {
    return Result<Tenant*>::failure(s.error());
  }
  if (outside_ != nullptr) {
    if (auto s = admit_beside_outside(*spec, &tenant->spec, gpus_, config_.reserve,
                                      specs_except(spec->name), *outside_);
        !s)
      return Result<Tenant*>::failure(s.error());
  }
  if (auto s = persist_with(&*spec, nullptr, {}); !s) return Result<Tenant*>::failure(s.error());
  const bool owners_changed = spec->owners != tenant->spec.owners;
  tenant->spec = std::move(*spec);
  tenant->segments->publish(tenant->spec, gpus_);
  if (owners_changed) {
    // The uid check at accept reads the new owners at once; the file follows.
    const SocketAccess access = socket_access(tenant->spec);
    if (auto s = set_socket_access(tenant->socket_path(), access.mode, access.owner); !s)
      spdlog::warn("tenant {}: new owners, but the socket file keeps its old access: {}",
                   tenant->spec.name, s.error());
    const auto doorbell = tenant->dir / "doorbell";  // the compute service's, same access
    std::error_code ec;
    if (std::filesystem::is_socket(doorbell, ec)) {
      if (auto s = set_socket_access(doorbell, access.mode, access.owner); !s)
        spdlog::warn("tenant {}: new owners, but the doorbell keeps its old access: {}",
                     tenant->spec.name, s.error());
    }
  }
  return tenant;
}

Status TenantRegistry::remove(std::string_view name) {
  auto it = tenants_.find(name);
  if (it == tenants_.end() && find_quarantined(name) != nullptr) {
    std::vector<InvalidTenantEntry> kept;
    for (const InvalidTenantEntry& e : quarantined_)
      if (e.name != name) kept.push_back(e);
    std::vector<const TenantSpec*> list;
    for (const auto& [n, t] : tenants_) list.push_back(&t->spec);
    if (auto s = store_.save(list, kept); !s) return s;
    quarantined_ = std::move(kept);
    TenantSpec gone;
    gone.name = std::string(name);
    if (validate_tenant_name(gone.name)) remove_files(gone);  // never a path built from a bad name
    return {};
  }
  if (it == tenants_.end())
    return Status::failure("no tenant named '" + std::string(name.substr(0, 80)) + "'");
  if (auto s = persist_with(nullptr, nullptr, name); !s) return s;
  const TenantSpec spec = it->second->spec;
  tenants_.erase(it);  // unmaps the segments
  ++generation_;
  remove_files(spec);
  return {};
}

Tenant* TenantRegistry::find(std::string_view name) {
  auto it = tenants_.find(name);
  return it == tenants_.end() ? nullptr : it->second.get();
}

// Several readers a tick (books check, audit, enforcer): the list is kept, rebuilt only
// after a tenant came or went, instead of walking the tree each time.
std::vector<Tenant*> TenantRegistry::all() {
  if (all_cache_.size() != tenants_.size() || all_generation_ != generation_) {
    all_cache_.clear();
    for (auto& [n, t] : tenants_) all_cache_.push_back(t.get());
    all_generation_ = generation_;
  }
  return all_cache_;
}

// Read by every maintenance tick: rebuilt only after a tenant came or went (a tenant's
// quota and ledger stay mapped at one address for its lifetime).
const std::vector<ArbiterMember>& TenantRegistry::arbiter_members() {
  if (members_generation_ != generation_ || members_cache_.size() != tenants_.size()) {
    members_cache_.clear();
    for (auto& [n, t] : tenants_) members_cache_.push_back({n, &t->quota(), &t->ledger()});
    members_generation_ = generation_;
  }
  return members_cache_;
}

}  // namespace fracgpu::broker
