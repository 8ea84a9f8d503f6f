// Broker start-up, shutdown and the glue between its parts. Timers: one maintenance
// tick every 100 ms checks every tenant's quota and ledger against the broker's record
// (books_check.h), retries pending reclaims (so memory of a dead process is back well
// within a second even when its tenant's counters are busy), and every tenth tick
// reclaims idle burst grants; the audit timer (--audit-interval, default 500 ms) compares
// NVML's per-process usage with the books (audit_service.h). An update that sets only a
// tenant's "pod" (the device plugin's attribution) skips admission, the quota files and
// the scheduler: it changes labels, never quotas. With --mps the MPS control daemon
// (mps_daemon.h) is started before the tenant sockets serve, and the schedulers follow
// its state (MPS mode while it runs).
#include "core/broker.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "common/logging.h"
#include "core/admission.h"
#include "core/file_mappers.h"
#include "core/host_memory.h"
#include "core/ledger_ops.h"
#include "core/process_tracker.h"
#include "core/quantity_parser.h"
#include "core/status_report.h"
#include "fracgpu/monotonic_clock.h"
#include "fracgpu/paths.h"

namespace fracgpu::broker {
namespace {

// {"name": ..., "pod": {...}} and nothing else.
bool is_pod_only_update(const nlohmann::json& tenant_json) {
  if (!tenant_json.is_object() || !tenant_json.contains("pod")) return false;
  for (const auto& [key, value] : tenant_json.items()) {
    if (key != "name" && key != "pod") return false;
  }
  return true;
}

// The pod-only update: validated and persisted like any update, but not re-admitted —
// admission would refuse a tenant whose GPU went missing or that no longer fits a grown
// --reserve, though nothing about its quota changes — and not re-published, so the
// tenant's processes see no new quota generation.
Result<Tenant*> set_pod_identity(TenantRegistry& registry, const nlohmann::json& tenant_json) {
  using R = Result<Tenant*>;
  const auto name_field = tenant_json.find("name");
  if (name_field == tenant_json.end() || !name_field->is_string())
    return R::failure("\"tenant\" must be an object with a \"name\"");
  const std::string name = name_field->get<std::string>();
  Tenant* tenant = registry.find(name);
  if (tenant == nullptr) return R::failure("no tenant named '" + name.substr(0, 80) + "'");
  auto spec = apply_tenant_update(tenant->spec, tenant_json);
  if (!spec) return R::failure(spec.error());
  if (spec->pod == tenant->spec.pod) return tenant;
  // Through the registry: its save keeps the quarantined entries of tenants.json.
  if (auto s = registry.persist_replacing(*spec); !s) return R::failure(s.error());
  tenant->spec.pod = std::move(spec->pod);
  return tenant;
}

void raise_fd_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

}  // namespace

Broker::Broker(BrokerOptions options) : options_(std::move(options)) {}

Broker::~Broker() {
  shutdown();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Status Broker::lock_run_dir() {
  std::error_code ec;
  std::filesystem::create_directories(options_.run_dir, ec);
  const std::string path = options_.run_dir + "/" + paths::kBrokerLockName;
  lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return Status::failure("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return Status::failure("another fracgpu broker is already serving " + options_.run_dir);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid.data(), pid.size(), 0) < 0) {
    spdlog::debug("cannot write the broker pid into {}", path);
  }
  return {};
}

void Broker::discover() {
  gpus_ = discover_gpus(InventoryOptions{options_.driver, options_.footprint_bytes});
  if (gpus_.gpus.empty()) spdlog::warn("no GPU: {}; tenants cannot be created", gpus_.problem);
  std::vector<uint64_t> capacity;
  for (const auto& g : gpus_.gpus) {
    spdlog::info("GPU {}: {} {} {} (capacity {}, {} per context)", g.index, g.uuid, g.name,
                 format_size(g.memory_total), format_size(gpu_capacity(g, options_.reserve_bytes)),
                 format_size(g.context_footprint));
    capacity.resize(g.index + 1, 0);
    capacity[g.index] = gpu_capacity(g, options_.reserve_bytes);
  }
  arbiter_ = MemoryArbiter(std::move(capacity));
}

Status Broker::start() {
  ::setenv("FRACGPU_DISABLE", "1", 1);  // a shim preloaded into the broker itself stays inert
  std::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  if (!loop_.valid()) return Status::failure("cannot create the event loop");
  if (auto s = lock_run_dir(); !s) return s;
  discover();
  registry_ = std::make_unique<TenantRegistry>(
      RegistryConfig{options_.run_dir, options_.state_dir, options_.reserve_bytes}, gpus_);
  if (auto s = registry_->prepare(); !s) return s;
  start_mps();  // before any registration: the first processes are MPS clients already
  tracker_ = std::make_unique<ProcessTracker>(
      loop_,
      [this](const std::string& t, uint32_t slot, pid_t pid) { on_process_death(t, slot, pid); });
  reconciler_ = std::make_unique<LedgerReconciler>(*registry_);
  auto restored = registry_->restore(RestoreOptions{.keep_going = options_.keep_going});
  if (!restored) return Status::failure(restored.error());
  spdlog::info("{} tenant(s) restored from {}/tenants.json, {} quarantined", *restored,
               options_.state_dir, registry_->quarantined().size());
  // The audit before the tenants' sockets: their handlers read it (a flagged tenant gets
  // no burst; NVML bounds a lost ledger's re-charges).
  audit_ =
      std::make_unique<AuditService>(options_.audit, *registry_, *tracker_, *reconciler_, gpus_);
  audit_->open();
  registry_->set_outside(&audit_->outside());  // new guarantees fit beside it (not restores)
  for (Tenant* t : registry_->all()) {
    if (auto s = open_tenant_socket(*t); !s)
      spdlog::error("tenant {}: {}", t->spec.name, s.error());
    adopt_processes(*t);
  }
  enforcer_ = std::make_unique<GuaranteeEnforcer>(
      EnforcerConfig{
          .host_budget = options_.swap_host_budget_bytes,
          .kill_unswappable = options_.reclaim == "kill",
          .idle_after_ns = static_cast<int64_t>(options_.swap_idle_after_s * 1e9),
          .reserve_floor = options_.swap_reserve_floor_bytes,
          .host_available = [] { return mem_available(); },
          .on_device = [this](const std::string& tenant,
                              uint32_t gpu) { return audit_->device_bytes(tenant, gpu); }},
      [this](const std::string& tenant) { return kill_tenant_processes(tenant); });
  audit_->note_grants();  // the grants as restored: the books check's starting record
  ComputeConfig compute_config = options_.compute;
  compute_config.mps = mps_ && mps_->running();
  compute_ = std::make_unique<ComputeService>(loop_, compute_config);
  compute_->set_tracker(tracker_.get());  // its ports read the registered slots only
  // Once per batch of deaths, not per death: a pass of the schedulers is O(tenants).
  tracker_->set_batch_done([this] {
    if (compute_) compute_->poke();
  });
  if (auto s = compute_->start(); !s) return s;
  compute_->sync(*registry_);
  admin_ = std::make_unique<AdminServer>(loop_, *this, ::geteuid());
  if (auto s = admin_->listen(std::filesystem::path(options_.run_dir) / paths::kAdminSocketName);
      !s)
    return s;
  loop_.add_timer(std::chrono::milliseconds(100), [this] { maintenance_tick(); });
  if (audit_->nvml_available()) {
    loop_.add_timer(std::chrono::milliseconds(audit_->interval_ms()), [this] {
      audit_->audit_tick();
      // Memory outside every tenant is no tenant's to borrow (outside_usage.h): when it
      // grows, the enforcer's next tick takes back what now sits on a guarantee.
      for (const GpuInfo& g : gpus_.gpus)
        enforce_due_ |= arbiter_.set_outside(g.index, audit_->outside().bytes(g.index));
    });
  }
  if (!loop_.stop_on_signals()) return Status::failure("cannot set up signal handling");
  loop_.set_state_mutex(&state_mutex_);
  if (!options_.metrics_listen.empty()) {
    HttpLimits limits;
    limits.head_timeout = std::chrono::milliseconds(options_.metrics_request_timeout_ms);
    limits.max_connections = static_cast<std::size_t>(options_.metrics_max_connections);
    limits.max_per_peer = static_cast<std::size_t>(options_.metrics_max_per_peer);
    metrics_ = std::make_unique<MetricsServer>(
        state_mutex_,
        [this] {
          return take_metrics_snapshot({*registry_, *tracker_, compute_.get(), audit_.get()});
        },
        limits);
    if (auto s = metrics_->start(*parse_listen_address(options_.metrics_listen)); !s) return s;
  }
  return {};
}

// --mps: the daemon, and MPS mode for the schedulers while it runs. Never fails the start:
// a daemon that cannot run leaves the broker time-slicing (mps_daemon.h).
void Broker::start_mps() {
  if (!options_.mps) return;
  mps_ =
      std::make_unique<MpsDaemon>(loop_, MpsDaemonOptions{options_.mps_control, options_.run_dir});
  mps_->set_on_change([this](bool running) {
    if (compute_) compute_->set_mps(running);
  });
  mps_->start_and_wait(5000);
}

Status Broker::open_tenant_socket(Tenant& tenant) {
  auto server = std::make_unique<TenantSocketServer>(
      loop_,
      TenantServices{*registry_, *tracker_, *reconciler_, arbiter_, audit_.get(), mps_.get(),
                     audit_ ? audit_->usage_port() : nullptr},
      tenant.spec.name);
  if (auto s = server->listen(); !s) return s;
  tenant_servers_[tenant.spec.name] = std::move(server);
  return {};
}

// After a restart: keep watching the processes that are still alive, reclaim the rest.
// A slot's pid and start time are the tenant's to write: a slot is re-attached only when
// its process holds this tenant's ledger (file_mappers.h), so that a slot forged while no
// broker ran, naming another tenant's process, makes that process nobody's business here.
void Broker::adopt_processes(Tenant& tenant) {
  TenantLedger& ledger = tenant.ledger();
  const auto file = tenant.segments->ledger_file();
  unsigned adopted = 0, gone = 0, foreign = 0;
  for (uint32_t i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& s = ledger.processes[i];
    if (static_cast<SlotState>(s.state.load()) != SlotState::kLive) continue;
    const pid_t pid = static_cast<pid_t>(s.pid.load());
    const auto holds = process_matches(pid, s.start_time.load())
                           ? process_holds_file(pid, FileIdentity{file.dev, file.ino})
                           : std::optional<bool>(true);  // gone: reclaimed by watch() below
    if (!holds)
      spdlog::warn(
          "tenant {}: cannot read /proc/{}/maps (the broker lacks the privilege): slot {} "
          "re-attached on pid and start time alone",
          tenant.spec.name, pid, i);
    if (holds == false) {
      spdlog::warn(
          "tenant {}: slot {} names pid {}, which does not hold this tenant's ledger: not "
          "re-attached, its books reclaimed",
          tenant.spec.name, i, pid);
      ledger::mark_dead(ledger, i);
      ++foreign;
      continue;
    }
    if (tracker_->watch(tenant.spec.name, i, pid, s.start_time.load())) {
      if (mps_) mps_->adopt_client(s.pid.load());  // counts its uid (mps_daemon.h)
      ++adopted;
    } else {
      ledger::mark_dead(ledger, i);
      ++gone;
    }
  }
  reconciler_->reconcile(tenant);  // slots of processes that died while no broker ran
  if (adopted + gone + foreign > 0)
    spdlog::info("tenant {}: {} live process(es) re-attached, {} reclaimed", tenant.spec.name,
                 adopted, gone + foreign);
}

void Broker::on_process_death(const std::string& name, uint32_t slot, pid_t pid) {
  Tenant* tenant = registry_->find(name);
  if (tenant == nullptr) return;
  reconciler_->process_died(*tenant, slot);  // the schedulers re-run after the batch
  if (mps_) mps_->client_exited(pid);
  spdlog::info("tenant {}: pid {} (slot {}) exited; memory reclaimed", name, pid, slot);
}

void Broker::maintenance_tick() {
  audit_->books_tick();  // first: nothing below may act on an altered quota or ledger
  reconciler_->tick();
  // A safety net, once a second: every change also rings a doorbell, and the schedulers
  // time their own passes while anyone waits (at least every 250 ms: the lease). A pass is
  // O(tenants): every tick would cost an idle broker with 1,000 tenants ~0.5 % CPU.
  if (ticks_ % 10 == 0) compute_->poke();
  // Guarantees before the idle-grant reclaim: a borrower's memory a guarantee needs is
  // asked back within one tick of the admin change that created the debt
  // (guarantee_enforcer.h), and every tick while a tenant that may swap borrows (its swap
  // reserve follows what it borrows, swap_reserve.h); with nothing open the pass also runs
  // once a second as a safety net, which keeps an idle broker with 1,000 tenants from
  // reading 2,000 segment pages ten times a second.
  const auto& members = registry_->arbiter_members();
  if (enforce_due_ || enforcer_->busy() || ticks_ % 10 == 0) {
    enforce_due_ = false;
    if (enforcer_->tick(members, arbiter_, monotonic_ns())) audit_->note_grants();
  }
  if (++ticks_ % 10 == 0) {
    arbiter_.reclaim(members);
    audit_->note_grants();
  }
}

// --reclaim kill: every registered process of the tenant (the broker's watches: a slot's
// pid and start time are the tenant's to write, and a forged slot naming another tenant's
// process must not get it killed), checked against its start time so that a reused pid is
// never signalled.
int Broker::kill_tenant_processes(const std::string& name) {
  if (registry_->find(name) == nullptr) return 0;
  int killed = 0;
  for (const ProcessTracker::Watched& w : tracker_->watches_of(name)) {
    const pid_t pid = static_cast<pid_t>(w.pid);
    const auto start = process_start_time(pid);
    if (pid <= 0 || !start || *start != w.start_time) continue;
    if (::kill(pid, SIGKILL) == 0) ++killed;
  }
  spdlog::warn("tenant {}: {} process(es) stopped to free memory a guarantee needs", name, killed);
  return killed;
}

Result<nlohmann::json> Broker::create_tenant(const nlohmann::json& tenant_json) {
  audit_->verify_grants();  // admission reads every tenant's grant
  auto tenant = registry_->create(tenant_json);
  if (!tenant) return Result<nlohmann::json>::failure(tenant.error());
  if (auto s = open_tenant_socket(**tenant); !s) {
    const std::string name = (*tenant)->spec.name;
    (void)registry_->remove(name);
    return Result<nlohmann::json>::failure(s.error());
  }
  compute_->sync(*registry_);
  audit_->note_grants();
  enforce_due_ = true;
  return tenant_status_json(**tenant, compute_.get(), audit_.get());
}

Result<nlohmann::json> Broker::update_tenant(const nlohmann::json& tenant_json) {
  if (is_pod_only_update(tenant_json)) {
    auto tenant = set_pod_identity(*registry_, tenant_json);
    if (!tenant) return Result<nlohmann::json>::failure(tenant.error());
    return tenant_status_json(**tenant, compute_.get(), audit_.get());
  }
  audit_->verify_grants();  // publish keeps the old grant: it must be the broker's
  auto tenant = registry_->update(tenant_json);
  if (!tenant) return Result<nlohmann::json>::failure(tenant.error());
  compute_->sync(*registry_);  // new weights, ceilings and classes apply at once
  audit_->note_grants();
  enforce_due_ = true;
  return tenant_status_json(**tenant, compute_.get(), audit_.get());
}

Status Broker::delete_tenant(const std::string& name) {
  // Forget the tenant on disk first: if that fails, it stays fully served.
  if (auto s = registry_->remove(name); !s) return s;
  if (auto it = tenant_servers_.find(name); it != tenant_servers_.end()) {
    it->second->shutdown(true);
    tenant_servers_.erase(it);
  }
  tracker_->forget_tenant(name);
  reconciler_->forget(name);
  audit_->forget(name);
  compute_->sync(*registry_);
  return {};
}

nlohmann::json Broker::list_tenants() {
  nlohmann::json list = nlohmann::json::array();
  for (Tenant* t : registry_->all())
    list.push_back(tenant_status_json(*t, compute_.get(), audit_.get()));
  for (auto& q : registry_->quarantined_json()) list.push_back(std::move(q));
  return list;
}

nlohmann::json Broker::list_gpus() {
  nlohmann::json list = gpus_json(gpus_, options_.reserve_bytes);
  // How the GPUs are shared: "time-slice", or "mps" with the daemon's state.
  const nlohmann::json sharing =
      mps_ ? mps_->status_json() : nlohmann::json{{"mode", "time-slice"}};
  for (std::size_t i = 0; i < list.size() && i < gpus_.gpus.size(); ++i) {
    if (audit_) {
      list[i]["audit"] = audit_->gpu_json(gpus_.gpus[i]);
      list[i]["outside"] = audit_->outside().gpu_json(gpus_.gpus[i].index);
    }
    list[i]["sharing"] = sharing;
  }
  return list;
}

// Registered processes still alive, over all tenants (at shutdown: may MPS quit?).
unsigned Broker::live_processes() {
  unsigned live = 0;
  if (!registry_) return live;
  for (Tenant* t : registry_->all())
    for (const ProcessSlot& s : t->ledger().processes)
      if (s.state.load() == static_cast<uint32_t>(SlotState::kLive) &&
          process_start_time(s.pid.load()) == std::optional<uint64_t>(s.start_time.load()))
        ++live;
  return live;
}

void Broker::notify_ready() {
  if (options_.ready_fd < 0) return;
  const char byte = 1;
  if (::write(options_.ready_fd, &byte, 1) != 1) spdlog::debug("cannot notify readiness");
  ::close(options_.ready_fd);
  options_.ready_fd = -1;
}

void Broker::shutdown() {
  if (mps_) mps_->shutdown(live_processes());
  mps_.reset();
  if (metrics_) metrics_->stop();
  metrics_.reset();
  if (admin_) admin_->shutdown(true);
  admin_.reset();
  for (auto& [name, server] : tenant_servers_) server->shutdown(true);
  tenant_servers_.clear();
  compute_.reset();
  audit_.reset();
  tracker_.reset();
}

int Broker::run() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (auto s = start(); !s) {
      spdlog::error("{}", s.error());
      return 1;
    }
  }
  spdlog::info("serving {} (admin socket {}/{})", options_.run_dir, options_.run_dir,
               paths::kAdminSocketName);
  notify_ready();
  loop_.run();
  // Before the state mutex: a scrape being rendered may be waiting for it.
  if (metrics_) metrics_->stop();
  std::lock_guard<std::mutex> lock(state_mutex_);
  shutdown();
  return 0;
}

int run_broker(BrokerOptions options) {
  if (auto s = setup_logging(options.log_level, "fracgpu-broker"); !s) {
    std::fprintf(stderr, "fracgpu-broker: %s\n", s.error().c_str());
    return 2;
  }
  if (auto s = resolve_broker_options(options); !s) {
    spdlog::error("{}", s.error());
    return 2;
  }
  Broker broker(std::move(options));
  return broker.run();
}

}  // namespace fracgpu::broker
