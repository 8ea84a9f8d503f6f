// Tenant management commands. Flags are validated before connecting; an update
// without --gpu applies to every GPU the tenant already has. `fracgpu set` is the
// same update, printing the tenant's row of the `fracgpu top` table afterwards.
#include "cli/tenant_commands.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "cli/status_command.h"
#include "client/admin_client.h"
#include "client/run_paths.h"
#include "core/quantity_parser.h"
#include "core/tenant_spec.h"

namespace fracgpu::cli {

using client::AdminClient;

namespace {

using nlohmann::json;

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "fracgpu: %s\n", message.c_str());
  return code;
}

Result<AdminClient> connect_node(const std::string& run_dir) {
  auto client = AdminClient::connect(run_dir, std::chrono::seconds(5));
  if (!client && client::admin_access_denied(client.error()))
    return Result<AdminClient>::failure(client.error());
  if (!client) {
    return Result<AdminClient>::failure("no fracgpu broker answers at " +
                                        client::admin_socket_path(run_dir).string() +
                                        " (start one with: fracgpu broker, or set --run-dir)");
  }
  return client;
}

// The GPUs a tenant already has, from the broker's list.
Result<std::vector<unsigned>> tenant_gpus(AdminClient& client, const std::string& name) {
  auto list = client.call({{"op", "list"}});
  if (!list) return Result<std::vector<unsigned>>::failure(list.error());
  for (const auto& t : (*list)["tenants"]) {
    if (t.value("name", "") != name) continue;
    std::vector<unsigned> gpus;
    for (const auto& d : t["devices"]) gpus.push_back(d.value("gpu", 0u));
    return gpus;
  }
  return Result<std::vector<unsigned>>::failure("no tenant named '" + name + "'");
}

void print_tenant(const char* verb, const json& tenant) {
  std::printf("%s tenant %s (socket %s)\n", verb, tenant.value("name", "?").c_str(),
              tenant.value("socket", "").c_str());
}

}  // namespace

int create_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags,
                  const std::vector<std::string>& owner_words) {
  if (auto s = broker::validate_tenant_name(name); !s) return fail(2, s.error());
  auto gpus = resolve_gpus(flags.gpus);
  if (!gpus) return fail(2, gpus.error());
  auto devices = device_entries(flags, *gpus, /*partial=*/false);
  if (!devices) return fail(2, devices.error());
  auto owners = resolve_owners(owner_words);
  if (!owners) return fail(2, owners.error());
  auto client = connect_node(run_dir);
  if (!client) return fail(1, client.error());
  json tenant = {{"name", name}, {"devices", *devices}};
  if (!owners->empty()) tenant["owners"] = *owners;
  auto reply = client->call({{"op", "create"}, {"tenant", std::move(tenant)}});
  if (!reply) return fail(1, reply.error());
  print_tenant("created", (*reply)["tenant"]);
  return 0;
}

namespace {

// An update as `tenant update` and `set` send it: flags checked before connecting,
// without --gpu applied to every GPU the tenant has. Returns 0 and the reply's
// TENANT_STATUS in *tenant, or the exit status after printing the error.
int send_update(const std::string& run_dir, const std::string& name, const QuotaFlags& flags,
                json* tenant, std::optional<AdminClient>* kept = nullptr,
                const std::vector<std::string>& owner_words = {}) {
  if (auto s = broker::validate_tenant_name(name); !s) return fail(2, s.error());
  auto given = flags.gpus.empty() ? Result<std::vector<unsigned>>(std::vector<unsigned>{})
                                  : resolve_gpus(flags.gpus);
  if (!given) return fail(2, given.error());
  // The flags' syntax, before connecting: against --gpu, or the GPUs a per-device map names.
  std::vector<unsigned> check_gpus = *given;
  if (check_gpus.empty()) check_gpus = per_device_gpus(flags);
  if (check_gpus.empty()) check_gpus = {0};
  auto check = device_entries(flags, check_gpus, /*partial=*/true);
  if (!check) return fail(2, check.error());
  const bool changes =
      std::any_of(check->begin(), check->end(), [](const json& d) { return d.size() > 1; });
  auto owners = resolve_owners(owner_words);
  if (!owners) return fail(2, owners.error());
  if (!changes && flags.gpus.empty() && owners->empty())
    return fail(2, "nothing to update: give --memory, --compute, --owner ...");
  auto client = connect_node(run_dir);
  if (!client) return fail(1, client.error());
  json update = {{"name", name}};
  if (!owners->empty()) update["owners"] = *owners;
  // An update of the owners alone leaves the devices as they are.
  if (changes || !flags.gpus.empty()) {
    auto gpus = given->empty() ? tenant_gpus(*client, name) : given;
    if (!gpus) return fail(1, gpus.error());
    auto devices = device_entries(flags, *gpus, /*partial=*/true);
    if (!devices) return fail(2, devices.error());
    update["devices"] = std::move(*devices);
  }
  auto reply = client->call({{"op", "update"}, {"tenant", std::move(update)}});
  if (!reply) return fail(1, reply.error());
  *tenant = (*reply)["tenant"];
  if (kept != nullptr) kept->emplace(std::move(*client));
  return 0;
}

}  // namespace

int update_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags,
                  const std::vector<std::string>& owner_words) {
  json tenant;
  if (int code = send_update(run_dir, name, flags, &tenant, nullptr, owner_words); code != 0)
    return code;
  print_tenant("updated", tenant);
  return 0;
}

int set_tenant(const std::string& run_dir, const std::string& name, const QuotaFlags& flags) {
  if (flags.memory.empty() && flags.memory_request.empty() && flags.compute.empty() &&
      flags.compute_limit.empty() && flags.priority.empty()) {
    return fail(2,
                "nothing to set: give --compute, --compute-limit, --priority or --memory (see "
                "fracgpu set --help)");
  }
  json tenant;
  std::optional<AdminClient> client;
  if (int code = send_update(run_dir, name, flags, &tenant, &client); code != 0) return code;
  // The whole list, so that the promised share reflects the other tenants on the GPU;
  // the update's own reply when the list cannot be had.
  json view = {{"tenants", json::array({tenant})}};
  if (auto list = client->call({{"op", "list"}}); list) view = std::move(*list);
  std::fputs(format_tenant_table(view, name).c_str(), stdout);
  return 0;
}

int delete_tenant(const std::string& run_dir, const std::string& name) {
  auto client = connect_node(run_dir);
  if (!client) return fail(1, client.error());
  auto reply = client->call({{"op", "delete"}, {"name", name}});
  if (!reply) return fail(1, reply.error());
  std::printf("deleted tenant %s\n", name.c_str());
  return 0;
}

}  // namespace fracgpu::cli
