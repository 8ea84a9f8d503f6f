// One-time initialisation of the shim (configuration, what the node's set-up lets the
// environment decide — core/injection_policy.h —, the real driver, the hooked functions,
// the tenant's registration and policies) and the exit-time hook-stats dump. Runs once, at
// the first CUDA call; afterwards tenant() and state() are one load each.
#include "shim_runtime.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/capture_tracker.h"
#include "core/driver_calls.h"
#include "core/hook_stats.h"
#include "core/injection_policy.h"
#include "core/mps_client_env.h"
#include "core/shim_log.h"
#include "driver_loader.h"
#include "fracgpu/paths.h"

namespace fracgpu::shim {

std::array<void*, kHookCount> g_real_functions{};
std::atomic<bool> g_initialized{false};
bool g_hooks_active = true;

namespace {

std::once_flag g_init_once;
std::atomic<ShimState*> g_state{nullptr};

void resolve_hooked_functions(void* driver) noexcept {
  if (driver == nullptr) return;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    std::string name(kHookCatalog[i].symbol);
    g_real_functions[i] = dlsym(driver, name.c_str());
  }
}

constexpr int kConnectTimeoutMs = 10000;

// What a tenant's process holds for its whole life (never destroyed: usable during exit).
struct Tenancy {
  TenantSession session;
  DriverCalls calls;
  FenceOps fence_ops;
  TenantPolicies* policies = nullptr;
};
Tenancy* g_tenancy = nullptr;

void* driver_symbol(void* driver, const char* name) {
  return driver != nullptr ? dlsym(driver, name) : nullptr;
}

// The child of fork() keeps no broker connection, capture or drainer of its parent's.
void tenant_after_fork_in_child() {
  g_tenancy->session.forget_parent_after_fork();
  CaptureTracker::process().reset_after_fork();
  g_tenancy->policies->compute.after_fork_in_child();
  g_tenancy->policies->swap.after_fork_in_child();
  g_tenancy->policies->app_vmm.after_fork_in_child();
}

const char* environment_value(const char* name) {
  return ::getenv(name);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A broker that runs MPS names its server in the register reply (core/mps_client_env.h):
// exported here, at the first CUDA call and before the driver's cuInit, which is when the
// driver reads them. setenv is not thread-safe against a concurrent getenv of the
// application's; it runs once, inside the shim's one-time initialisation.
void export_mps_environment(const MpsClientSettings& settings) {
  if (settings.pipe_dir.empty()) return;
  const MpsEnvironment env =
      mps_environment(settings, &environment_value, &is_directory, paths::kContainerMpsPipeDir);
  for (const std::string& warning : env.warnings)
    FRACGPU_LOG(LogLevel::kWarn, "%s", warning.c_str());
  for (const auto& [name, value] : env.set) ::setenv(name.c_str(), value.c_str(), 1);
  if (!env.set.empty())
    FRACGPU_LOG(LogLevel::kInfo, "MPS client of the broker's server (%s, priority %s)",
                ::getenv("CUDA_MPS_PIPE_DIRECTORY"), ::getenv("CUDA_MPS_CLIENT_PRIORITY"));
}

// Registers with the tenant's broker at `socket_path` and sets up the policies. A process
// that belongs to a tenant counts its open stream captures from the first CUDA call on, so
// that nothing the shim does can invalidate one (core/capture_tracker.h). False when the
// broker cannot be reached or refuses.
bool start_tenant(const std::string& socket_path, void* driver, std::string* error) {
  auto* tenancy = new Tenancy();
  if (!tenancy->session.attach(socket_path, kConnectTimeoutMs, error)) {
    delete tenancy;
    return false;
  }
  resolve_driver_calls(&driver_symbol, driver, &tenancy->calls);
  resolve_driver_calls(&driver_symbol, driver, &tenancy->fence_ops);
  FRACGPU_LOG(LogLevel::kInfo, "registered with tenant '%s' (slot %u)",
              tenancy->session.tenant().c_str(), tenancy->session.slot());
  export_mps_environment(tenancy->session.mps());
  CaptureOps capture_ops;
  resolve_driver_calls(&driver_symbol, driver, &capture_ops);
  CaptureTracker::process().init(capture_ops);
  tenancy->policies =
      new TenantPolicies(tenancy->session, tenancy->calls, tenancy->fence_ops,
                         CaptureTracker::process(), tenancy->session.directory() + "/doorbell");
  g_tenancy = tenancy;
  pthread_atfork(nullptr, nullptr, &tenant_after_fork_in_child);
  return true;
}

// Rule b of core/injection_policy.h: on a node with a broker, the named socket must be
// served by root or the broker's uid, and sit where no other uid can replace it; the
// registration then uses its real path, so nothing can be swapped in between. Returns
// false with *error set; *unreachable when the socket did not answer at all.
bool verify_node_socket(const InjectionPlan& plan, std::string* socket_path, std::string* error,
                        bool* unreachable) {
  BrokerConnection probe;
  if (!probe.connect(plan.socket_path, kConnectTimeoutMs, error)) {
    *unreachable = true;
    return false;
  }
  const std::optional<uid_t> server = probe.server_uid();
  probe.close();
  if (!server) {
    *error = "cannot tell who serves FRACGPU_SOCKET=" + plan.socket_path +
             " (no peer credentials); CUDA is unavailable to this process";
    return false;
  }
  const std::string evidence = node_broker_evidence(NodePaths{}.run_dir, *plan.node_broker_uid);
  if (auto refusal = untrusted_server(plan.socket_path, *server, *plan.node_broker_uid)) {
    *error = *refusal + evidence;
    return false;
  }
  std::vector<PathEntry> entries;
  if (!inspect_path(plan.socket_path, socket_path, &entries, error)) {
    *error = "FRACGPU_SOCKET=" + plan.socket_path + ": " + *error +
             "; CUDA is unavailable to this process";
    return false;
  }
  if (auto unsafe = unsafe_socket_path(entries, *plan.node_broker_uid)) {
    *error = *unsafe + evidence;
    return false;
  }
  return true;
}

// A tenant socket that cannot be reached or trusted makes the shim fail closed: CUDA
// answers as if no driver were present, because running without the quota would break the
// tenant's isolation promise to everyone else on the GPU.
void join_tenant(ShimState* s, const InjectionPlan& plan, void* driver) noexcept {
  std::string error;
  std::string socket_path = plan.socket_path;
  bool unreachable = false;
  if (plan.node_broker_uid && !verify_node_socket(plan, &socket_path, &error, &unreachable) &&
      !unreachable) {
    FRACGPU_LOG(LogLevel::kError, "%s", error.c_str());
    s->driver_handle = nullptr;
    return;
  }
  if (!unreachable && start_tenant(socket_path, driver, &error)) return;
  FRACGPU_LOG(
      LogLevel::kError,
      "cannot register with the fracgpu broker at %s (%s); CUDA is unavailable to this process "
      "until the broker runs",
      plan.socket_path.c_str(), error.c_str());
  s->driver_handle = nullptr;
}

// Where this shim was loaded from, for the /etc/ld.so.preload check ("" if unknown).
std::string own_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&initialize_slow), &info) == 0 || info.dli_fname == nullptr)
    return std::string();
  return info.dli_fname;
}

void initialize_once() noexcept {
  auto* s = new ShimState();
  s->config = shim_config_from_environment();
  set_log_level(s->config.log_level);
  for (const std::string& problem : s->config.problems) {
    FRACGPU_LOG(LogLevel::kWarn, "%s", problem.c_str());
  }
  // How much of the environment counts depends on what the node set up (a few stat calls).
  const InjectionPlan plan = plan_injection(s->config, read_node_facts(NodePaths{}, own_path()));
  for (const std::string& warning : plan.warnings) {
    FRACGPU_LOG(LogLevel::kWarn, "%s", warning.c_str());
  }
  const bool pass_through = plan.action == InjectionPlan::Action::kPassThrough;
  LoadedDriver driver = load_real_driver(s->config);
  s->driver_handle = driver.handle;
  s->driver_path = driver.path;
  if (driver.handle != nullptr && plan.action == InjectionPlan::Action::kRegister)
    join_tenant(s, plan, driver.handle);
  resolve_hooked_functions(s->driver_handle);
  s->proc_address.build(g_real_functions, wrapper_addresses(), CUDA_VERSION);
  g_hooks_active = !pass_through;
  if (pass_through) FRACGPU_LOG(LogLevel::kInfo, "FRACGPU_DISABLE is set: pass-through only");
  HookStats::enable(!s->config.hook_stats_path.empty());
  g_state.store(s, std::memory_order_release);
}

}  // namespace

void warn_unavailable(std::string_view symbol) noexcept {
  const int n = static_cast<int>(symbol.size());
  if (state() != nullptr && state()->driver_handle != nullptr)
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8, "%.*s is not provided by the CUDA driver", n,
                       symbol.data());
  else
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8,
                       "%.*s fails: CUDA is unavailable to this process (no driver in use)", n,
                       symbol.data());
}

void initialize_slow() noexcept {
  std::call_once(g_init_once, initialize_once);
  g_initialized.store(true, std::memory_order_release);
}

ShimState* state() noexcept {
  return g_state.load(std::memory_order_acquire);
}

TenantSession* tenant_session() noexcept {
  return g_tenancy != nullptr ? &g_tenancy->session : nullptr;
}
TenantPolicies* tenant() noexcept {
  return g_tenancy != nullptr ? g_tenancy->policies : nullptr;
}

}  // namespace fracgpu::shim

// Writes the hook counters when the process exits normally (FRACGPU_HOOK_STATS only).
__attribute__((destructor)) static void fracgpu_write_hook_stats() {
  using namespace fracgpu;
  shim::ShimState* s = shim::state();
  if (s == nullptr || s->config.hook_stats_path.empty()) return;
  const std::string path =
      expand_pid_pattern(s->config.hook_stats_path, static_cast<int>(getpid()));
  const std::string json =
      HookStats::to_json(static_cast<int>(getpid()), s->driver_path, s->proc_address.stats());
  if (!HookStats::write_file(path, json)) {
    FRACGPU_LOG(LogLevel::kWarn, "cannot write hook stats to %s", path.c_str());
  }
}
