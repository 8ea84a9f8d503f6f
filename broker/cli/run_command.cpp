// The `fracgpu run` sequence. Order matters for the "nothing started on bad input"
// promise: flags, the shim's presence and the GPUs are all checked before the tenant
// is created (or joined), and the tenant exists, with this process registered in it,
// before the command starts.
#include "cli/run_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "cli/command_runner.h"
#include "cli/run_cgroup.h"
#include "cli/run_route.h"
#include "cli/tenant_membership.h"
#include "client/admin_client.h"
#include "client/private_broker.h"
#include "client/run_paths.h"
#include "core/tenant_spec.h"

namespace fracgpu::cli {
namespace {

using client::AdminClient;
using client::PrivateBroker;

using nlohmann::json;

constexpr auto kRegisterTimeout = std::chrono::seconds(10);

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "fracgpu: %s\n", message.c_str());
  return code;
}

// Where tenants are created: the node broker's run directory, or a private broker's.
struct BrokerChoice {
  std::filesystem::path run_dir;
  std::unique_ptr<PrivateBroker> private_broker;
  json gpus;
  std::string gpu_problem;
};

std::optional<json> ask_gpus(const std::filesystem::path& run_dir, std::string* problem) {
  auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
  if (!client) return std::nullopt;
  auto reply = client->call({{"op", "gpus"}});
  if (!reply || !(*reply)["gpus"].is_array()) return std::nullopt;
  *problem = reply->value("gpu_problem", "");
  return (*reply)["gpus"];
}

// The node broker when its admin socket answers us; a private broker where none runs or
// we are root; otherwise (a node broker we may not create tenants with) a refusal.
Result<BrokerChoice> choose_broker(const std::string& run_dir) {
  BrokerChoice choice;
  auto node_gpus = ask_gpus(run_dir, &choice.gpu_problem);
  const RunRouteChoice route = choose_run_route(
      {false, node_gpus.has_value(), node_broker_uid(run_dir), ::getuid(), run_dir});
  if (route.route == RunRoute::kNodeAdmin) {
    choice.run_dir = run_dir;
    choice.gpus = std::move(*node_gpus);
    return choice;
  }
  if (route.route != RunRoute::kPrivateBroker) return Result<BrokerChoice>::failure(route.message);
  choice.private_broker = std::make_unique<PrivateBroker>();
  if (auto s = choice.private_broker->start(); !s) return Result<BrokerChoice>::failure(s.error());
  choice.run_dir = choice.private_broker->run_dir();
  auto gpus = ask_gpus(choice.run_dir, &choice.gpu_problem);
  if (!gpus) return Result<BrokerChoice>::failure("the private broker does not answer");
  choice.gpus = std::move(*gpus);
  return choice;
}

// The first quota flag given, for refusing it with --tenant (the tenant's quota is its
// administrator's).
std::optional<std::string> quota_flag_given(const QuotaFlags& q) {
  if (!q.memory.empty()) return "--memory";
  if (!q.memory_request.empty()) return "--memory-request";
  if (!q.compute.empty()) return "--compute";
  if (!q.compute_limit.empty()) return "--compute-limit";
  if (!q.priority.empty()) return "--priority";
  if (!q.gpus.empty()) return "--gpu";
  return std::nullopt;
}

std::string no_gpu_message(const std::string& problem) {
  return "no NVIDIA GPU or CUDA driver found on this machine (" +
         (problem.empty() ? "no GPU reported" : problem) +
         "); to see fracgpu on the simulated GPU run: fracgpu demo";
}

std::map<std::string, std::string> command_environment(const std::string& shim, const json& tenant,
                                                       const RunRequest& request) {
  std::map<std::string, std::string> env;
  env["LD_PRELOAD"] = prepend_preload(shim, std::getenv("LD_PRELOAD"));
  env["FRACGPU_SOCKET"] = tenant.value("socket", "");
  // An explicit --gpu also decides what the program sees, unless the user already chose.
  if (!request.quota.gpus.empty() && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
    std::string uuids;
    for (const auto& d : tenant["devices"]) {
      // Appended piece by piece: operator+ on a literal trips GCC 12's false -Wrestrict at -O3.
      if (!uuids.empty()) uuids += ',';
      uuids += d.value("uuid", "");
    }
    env["CUDA_VISIBLE_DEVICES"] = uuids;
  }
  return env;
}

void delete_tenant(const BrokerChoice& broker, const std::string& name) {
  if (broker.private_broker) return;  // goes away with its broker
  auto client = AdminClient::connect(broker.run_dir, std::chrono::seconds(10));
  auto result = client ? client->call({{"op", "delete"}, {"name", name}})
                       : Result<json>::failure(client.error());
  if (!result)
    std::fprintf(stderr, "fracgpu: could not delete tenant %s: %s\n", name.c_str(),
                 result.error().c_str());
}

// Why the tenant socket cannot be used, in the caller's terms, before connecting: no such
// tenant, or a one-owner socket (0600) of another uid. A shared socket admits by uid at
// accept, and the broker's refusal then says the same.
std::optional<std::string> socket_problem(const std::string& socket, const std::string& tenant) {
  struct stat st {};
  if (::stat(socket.c_str(), &st) != 0 && errno == ENOENT) {
    return "no tenant " + tenant + " here (" + socket +
           " does not exist); an administrator creates it with: fracgpu tenant create " + tenant +
           " --owner USER --memory SIZE";
  }
  if (::access(socket.c_str(), R_OK | W_OK) != 0 && errno == EACCES) {
    const std::string uid = std::to_string(::getuid());
    return "cannot join tenant " + tenant + ": uid " + uid +
           " is not one of its owners; an administrator can add it with: fracgpu tenant update " +
           tenant + " --owner " + uid;
  }
  return std::nullopt;
}

// Which attribution is in force, said when FRACGPU_LOG_LEVEL asks for info or debug (the
// shim's variable: one knob for how talkative fracgpu is).
void say_attribution(const RunCgroup& cgroup) {
  const char* level = std::getenv("FRACGPU_LOG_LEVEL");
  if (level == nullptr) return;
  const std::string l = level;
  if (l == "info" || l == "debug")
    std::fprintf(stderr, "fracgpu: this run's processes are attributed by %s\n",
                 cgroup.attribution().c_str());
}

RunCgroup enter_cgroup(const RunRequest& request) {
  RunCgroup cgroup =
      RunCgroup::enter(request.cgroup == "off" ? RunCgroup::Mode::kOff : RunCgroup::Mode::kAuto);
  say_attribution(cgroup);
  return cgroup;
}

Supervision supervision(const RunRequest& request, const RunCgroup& cgroup, pid_t excluded) {
  Supervision s;
  s.keep_descendants = true;
  s.grace = std::chrono::milliseconds(static_cast<int64_t>(request.stop_grace_s * 1000));
  if (excluded > 0) s.excluded.push_back(excluded);
  if (cgroup.active()) s.cgroup_pids = [&cgroup] { return cgroup.pids(); };
  return s;
}

void report_stopped(const StopOutcome& stopped, double grace_s) {
  if (!stopped.any()) return;
  std::fprintf(stderr,
               "fracgpu: the command left %zu process(es) running; stopped them (%zu after "
               "SIGTERM, %zu with SIGKILL after the %g s grace)\n",
               stopped.terminated + stopped.killed + stopped.left.size(), stopped.terminated,
               stopped.killed, grace_s);
  if (stopped.left.empty()) return;
  std::string pids;
  for (pid_t pid : stopped.left) {  // appended: GCC 12 -O3 -Wrestrict misreads literal + temp
    if (!pids.empty()) pids += ' ';
    pids += std::to_string(pid);
  }
  std::fprintf(stderr, "fracgpu: still alive after SIGKILL: pid %s\n", pids.c_str());
}

// `fracgpu run --tenant NAME`: the node's existing tenant, nothing created or deleted.
int join_tenant_and_run(const RunRequest& request) {
  if (!request.name.empty()) {
    return fail(kExitUsage,
                "--tenant joins an existing tenant and --name names a new one: give one of them");
  }
  if (auto flag = quota_flag_given(request.quota)) {
    return fail(kExitUsage,
                "--tenant joins an existing tenant, whose quota its administrator "
                "sets: leave out " +
                    *flag);
  }
  if (auto s = broker::validate_tenant_name(request.tenant); !s) return fail(kExitUsage, s.error());
  auto shim = locate_shim();
  if (!shim) return fail(kExitFailure, shim.error());
  const RunRouteChoice route = choose_run_route(
      {true, false, node_broker_uid(request.run_dir), ::getuid(), request.run_dir});
  if (route.route != RunRoute::kJoinTenant) return fail(kExitFailure, route.message);
  const std::string socket =
      client::tenant_socket_path(request.run_dir, request.tenant, /*has_owners=*/true).string();
  if (auto problem = socket_problem(socket, request.tenant)) return fail(kExitFailure, *problem);
  // Before registering: the broker reads a registered process's cgroup once.
  RunCgroup cgroup = enter_cgroup(request);
  auto membership = TenantMembership::join(socket, kRegisterTimeout);
  if (!membership)
    return fail(kExitFailure, "cannot join tenant " + request.tenant + ": " + membership.error());
  std::map<std::string, std::string> env;
  env["LD_PRELOAD"] = prepend_preload(*shim, std::getenv("LD_PRELOAD"));
  env["FRACGPU_SOCKET"] = socket;
  CommandResult result = run_command(request.command, env, supervision(request, cgroup, -1));
  report_stopped(result.stopped, request.stop_grace_s);
  membership->leave();
  cgroup.leave();
  if (!result.error.empty()) return fail(result.exit_status, result.error);
  return result.exit_status;
}

}  // namespace

Result<std::string> locate_shim() {
  std::filesystem::path shim;
  if (const char* env = std::getenv("FRACGPU_SHIM"); env != nullptr && *env != '\0') {
    shim = env;
  } else {
    std::error_code ec;
    const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    shim = exe.parent_path() / ".." / "lib" / "libfracgpu.so";
    shim = std::filesystem::weakly_canonical(shim, ec);
  }
  if (::access(shim.c_str(), R_OK) != 0) {
    return Result<std::string>::failure(
        "the fracgpu shim " + shim.string() +
        " is missing (set FRACGPU_SHIM to the path of libfracgpu.so)");
  }
  return shim.string();
}

int run_tenant_command(const RunRequest& request) {
  if (request.command.empty()) {
    return fail(kExitUsage,
                "missing the command to run (usage: fracgpu run [--memory SIZE] [options] -- CMD "
                "[ARGS...])");
  }
  if (!request.tenant.empty()) return join_tenant_and_run(request);
  const std::string name =
      request.name.empty() ? "run-" + std::to_string(::getpid()) : request.name;
  if (auto s = broker::validate_tenant_name(name); !s) return fail(kExitUsage, s.error());
  auto gpus = resolve_gpus(request.quota.gpus);
  if (!gpus) return fail(kExitUsage, gpus.error());
  auto devices = device_entries(request.quota, *gpus, /*partial=*/false);
  if (!devices) return fail(kExitUsage, devices.error());
  auto shim = locate_shim();
  if (!shim) return fail(kExitFailure, shim.error());

  auto broker = choose_broker(request.run_dir);
  if (!broker) return fail(kExitFailure, broker.error());
  if (broker->gpus.empty()) return fail(kExitFailure, no_gpu_message(broker->gpu_problem));
  auto client = AdminClient::connect(broker->run_dir);
  if (!client) return fail(kExitFailure, client.error());
  // Owned by the caller: only its uid (and root) may register in it.
  const json owners = json::array({static_cast<uint32_t>(::getuid())});
  auto created = client->call(
      {{"op", "create"}, {"tenant", {{"name", name}, {"owners", owners}, {"devices", *devices}}}});
  if (!created) return fail(kExitFailure, created.error());

  const json& tenant = (*created)["tenant"];
  RunCgroup cgroup = enter_cgroup(request);  // before registering, as above
  auto membership = TenantMembership::join(tenant.value("socket", ""), kRegisterTimeout);
  if (!membership) {
    cgroup.leave();
    delete_tenant(*broker, name);
    return fail(kExitFailure, "cannot register in tenant " + name + ": " + membership.error());
  }
  const pid_t private_pid = broker->private_broker ? broker->private_broker->pid() : -1;
  CommandResult result = run_command(request.command, command_environment(*shim, tenant, request),
                                     supervision(request, cgroup, private_pid));
  report_stopped(result.stopped, request.stop_grace_s);
  membership->leave();
  cgroup.leave();
  delete_tenant(*broker, name);
  if (!result.error.empty()) return fail(result.exit_status, result.error);
  return result.exit_status;
}

}  // namespace fracgpu::cli
