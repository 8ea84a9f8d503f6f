// The `fracgpu run` sequence. Order matters for the "nothing started on bad input"
// promise: flags, the shim's presence and the GPUs are all checked before the tenant
// is created, and the tenant exists before the command starts.
#include "cli/run_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include "cli/command_runner.h"
#include "client/admin_client.h"
#include "client/private_broker.h"
#include "core/tenant_spec.h"

namespace fracgpu::cli {
namespace {

using client::AdminClient;
using client::PrivateBroker;

using nlohmann::json;

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

Result<BrokerChoice> choose_broker(const std::string& run_dir) {
  BrokerChoice choice;
  if (auto gpus = ask_gpus(run_dir, &choice.gpu_problem)) {
    choice.run_dir = run_dir;
    choice.gpus = std::move(*gpus);
    return choice;
  }
  choice.private_broker = std::make_unique<PrivateBroker>();
  if (auto s = choice.private_broker->start(); !s) return Result<BrokerChoice>::failure(s.error());
  choice.run_dir = choice.private_broker->run_dir();
  auto gpus = ask_gpus(choice.run_dir, &choice.gpu_problem);
  if (!gpus) return Result<BrokerChoice>::failure("the private broker does not answer");
  choice.gpus = std::move(*gpus);
  return choice;
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
  auto created =
      client->call({{"op", "create"}, {"tenant", {{"name", name}, {"devices", *devices}}}});
  if (!created) return fail(kExitFailure, created.error());

  const json& tenant = (*created)["tenant"];
  CommandResult result = run_command(request.command, command_environment(*shim, tenant, request));
  delete_tenant(*broker, name);
  if (!result.error.empty()) return fail(result.exit_status, result.error);
  return result.exit_status;
}

}  // namespace fracgpu::cli
