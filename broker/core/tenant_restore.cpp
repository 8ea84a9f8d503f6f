// TenantRegistry::restore and the quarantine: bringing the persisted tenants back after
// a restart without ever losing one silently. Validation comes first and covers the
// whole file (every entry parsed, then re-admitted against the entries before it, as
// if they were created again in file order, since the GPU may have shrunk or --reserve
// grown since), so a refused start has touched nothing. With keep_going, a tenant that
// fails is quarantined: its entry is kept verbatim (StateStore writes it back on every
// save, so admin changes to other tenants never drop it), its run files are left as
// they are, it is listed with its reason, and tenants.json is copied to a timestamped
// backup before the broker writes the file again. Runs once at start; no hot path.
#include <spdlog/spdlog.h>

#include "core/admission.h"
#include "core/tenant_registry.h"

namespace fracgpu::broker {
namespace {

constexpr const char* kRefusedHint =
    " — the broker does not start so that no tenant is lost: fix tenants.json (or the GPU "
    "configuration), or start with --keep-going to quarantine these tenants and serve the others";

std::string joined_reasons(const std::vector<InvalidTenantEntry>& entries) {
  std::string out;
  for (const InvalidTenantEntry& e : entries) out += (out.empty() ? "" : "; ") + e.reason;
  return out;
}

}  // namespace

const InvalidTenantEntry* TenantRegistry::find_quarantined(std::string_view name) const {
  for (const InvalidTenantEntry& e : quarantined_)
    if (e.name == name) return &e;
  return nullptr;
}

nlohmann::json TenantRegistry::quarantined_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const InvalidTenantEntry& e : quarantined_)
    list.push_back({{"name", e.name},
                    {"quarantined", true},
                    {"reason", e.reason},
                    {"devices", nlohmann::json::array()}});  // for readers that expect them
  return list;
}

// The admission a create would apply (on a copy: the persisted spec, UUIDs included, is
// what stays). attach() checks the rest (socket path length, the files). A GPU that is gone
// (fallen off the bus, hidden by a driver fault) is an event of the hardware, not a bad
// entry: stopping the broker over it would take every tenant of the node down, so the
// tenant is kept, loudly, and its other GPUs are admitted as usual; its share of the
// missing GPU is served again once the GPU is back.
Status TenantRegistry::admit_restored(const TenantSpec& spec,
                                      const std::vector<const TenantSpec*>& before) const {
  TenantSpec copy = spec;
  copy.devices.clear();
  for (const DeviceSpec& d : spec.devices) {
    const GpuInfo* gpu = gpus_.find(d.gpu);
    if (gpu == nullptr) {
      spdlog::error(
          "tenant {}: GPU {} ({}) is not on this node now: the tenant is kept, and served "
          "there again once the GPU is back",
          spec.name, d.gpu, d.uuid.empty() ? "no UUID recorded" : d.uuid);
      continue;
    }
    if (!d.uuid.empty() && gpu->uuid != d.uuid) {
      spdlog::warn("tenant {}: GPU {} is {} now, it was {} when the tenant was created", spec.name,
                   d.gpu, gpu->uuid, d.uuid);
    }
    copy.devices.push_back(d);
  }
  if (copy.devices.empty()) return {};
  return admit_tenant(copy, gpus_, config_.reserve, before);
}

void TenantRegistry::quarantine(std::vector<InvalidTenantEntry> entries, bool& backed_up) {
  if (entries.empty()) return;
  std::string copy_note;
  if (!backed_up) {
    auto copy = store_.backup();
    copy_note = copy ? "; tenants.json was copied to " + copy->string()
                     : "; no backup of tenants.json could be made: " + copy.error();
    backed_up = true;
  }
  for (InvalidTenantEntry& e : entries) {
    spdlog::error(
        "quarantined {} (--keep-going): it is not served, and its entry stays in "
        "tenants.json as it is until it is fixed or the tenant is deleted{}",
        e.reason, copy_note);
    quarantined_.push_back(std::move(e));
  }
}

Result<std::size_t> TenantRegistry::restore(const RestoreOptions& options) {
  using R = Result<std::size_t>;
  auto stored = store_.load();
  if (!stored) {
    if (!options.keep_going) return R::failure(stored.error() + kRefusedHint);
    // The next save replaces the file, so a copy must exist before the broker may start.
    auto copy = store_.backup();
    if (!copy) {
      return R::failure(stored.error() + "; and it cannot be backed up (" + copy.error() +
                        "), so the broker does not start even with --keep-going");
    }
    spdlog::error("{}; starting without them (--keep-going); the file was copied to {}",
                  stored.error(), copy->string());
    return std::size_t{0};
  }
  std::vector<InvalidTenantEntry> problems = std::move(stored->invalid);
  std::vector<std::size_t> admitted;  // indexes into stored->specs
  std::vector<const TenantSpec*> before;
  for (std::size_t i = 0; i < stored->specs.size(); ++i) {
    const TenantSpec& spec = stored->specs[i];
    if (auto s = admit_restored(spec, before); !s) {
      problems.push_back({spec.name, stored->entries[i],
                          "tenant " + spec.name + " no longer passes admission: " + s.error()});
      continue;
    }
    admitted.push_back(i);
    before.push_back(&spec);
  }
  if (!problems.empty() && !options.keep_going)
    return R::failure(joined_reasons(problems) + kRefusedHint);
  bool backed_up = false;
  quarantine(std::move(problems), backed_up);
  for (std::size_t i : admitted) {
    const TenantSpec& spec = stored->specs[i];
    auto tenant = attach(spec);
    if (!tenant) {
      InvalidTenantEntry failed{spec.name, stored->entries[i],
                                "tenant " + spec.name + " cannot be restored: " + tenant.error()};
      if (!options.keep_going) return R::failure(failed.reason + kRefusedHint);
      quarantine({std::move(failed)}, backed_up);
      continue;
    }
    const TenantSegments& seg = *(*tenant)->segments;
    spdlog::info("restored tenant {} (ledger {}{})", spec.name,
                 seg.ledger_rebuilt()  ? "rebuilt from its processes' slots"
                 : seg.ledger_reused() ? "re-attached"
                                       : "new",
                 seg.ledger_migrated() ? ", moved out of the tenant's directory" : "");
    tenants_.emplace(spec.name, std::move(*tenant));
    ++generation_;
  }
  return tenants_.size();
}

std::size_t TenantRegistry::restore() {
  auto restored = restore(RestoreOptions{.keep_going = true});
  return restored ? *restored : tenants_.size();
}

}  // namespace fracgpu::broker
