// fracgpu: the user CLI (run, set, status, top, tenant, broker, demo). Parsing only; every command
// is implemented in fracgpu_cli_commands (cli/*). Parse errors are one line on stderr and exit
// status 2, before anything is contacted or started.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli_options.h"
#include "cli/demo_command.h"
#include "cli/run_command.h"
#include "cli/status_command.h"
#include "cli/tenant_commands.h"
#include "cli/top_command.h"
#include "common/build_info.h"
#include "core/broker.h"
#include "fracgpu/paths.h"

namespace {

using namespace fracgpu;

struct Commands {
  std::string run_dir = paths::kRunDir;
  cli::RunRequest run;
  bool status_json = false;
  broker::BrokerOptions broker;
  std::string tenant_name;
  cli::QuotaFlags create_flags, update_flags, set_flags;
  std::vector<std::string> owners;  // tenant create/update --owner
  cli::TopFlags top;
  CLI::App *demo_cmd = nullptr, *set_cmd = nullptr, *top_cmd = nullptr, *version_cmd = nullptr;
  CLI::App *run_cmd = nullptr, *status_cmd = nullptr, *broker_cmd = nullptr, *create_cmd = nullptr,
           *update_cmd = nullptr, *delete_cmd = nullptr, *list_cmd = nullptr;
};

void define_run(CLI::App& app, Commands& c) {
  c.run_cmd = app.add_subcommand(
      "run", "Run a command as a tenant with a GPU memory cap and compute share");
  cli::add_quota_flags(*c.run_cmd, c.run.quota, cli::QuotaCommand::kRun);
  c.run_cmd->add_option("--name", c.run.name, "Tenant name (default run-<pid>)");
  c.run_cmd->add_option("--tenant", c.run.tenant,
                        "Join the existing tenant NAME of the node broker instead of creating "
                        "one (for its owners: fracgpu tenant create NAME --owner USER ...)");
  c.run_cmd
      ->add_option("--stop-grace", c.run.stop_grace_s,
                   "When the command exits, its descendants still running get SIGTERM, and "
                   "SIGKILL this many seconds later (default 5; 0-3600)")
      ->check(CLI::Range(0.0, 3600.0));
  c.run_cmd
      ->add_option("--cgroup", c.run.cgroup,
                   "auto (default): run in a cgroup v2 of its own where the host allows it; off: "
                   "attribute the command's processes by ancestry only")
      ->check(CLI::IsMember({"auto", "off"}));
  c.run_cmd->footer(
      "Usage: fracgpu run [--memory SIZE] [options] [--] CMD [ARGS...]\n"
      "       fracgpu run --tenant NAME [--] CMD [ARGS...]\n"
      "Without --memory the command may use the GPU's memory that no other tenant is guaranteed "
      "(its\n"
      "capacity minus the other tenants' --memory-request, counted when the tenant is created), "
      "with\n"
      "nothing guaranteed unless --memory-request is given (for a command that wants a compute "
      "share\n"
      "and no cap of its own).\n"
      "Where a node broker serves the run directory, only root (or the broker's user) creates "
      "tenants;\n"
      "other users run in a tenant an administrator made for them, with --tenant NAME.");
}

void define_tenant(CLI::App& app, Commands& c) {
  auto* tenant =
      app.add_subcommand("tenant", "Manage the node broker's tenants")->require_subcommand(1);
  c.create_cmd = tenant->add_subcommand("create", "Create a tenant");
  c.create_cmd->add_option("name", c.tenant_name, "Tenant name")->required();
  cli::add_quota_flags(*c.create_cmd, c.create_flags, cli::QuotaCommand::kCreate);
  c.create_cmd
      ->add_option("--owner", c.owners,
                   "User (name or uid) who may run in the tenant (repeatable, or a comma list); "
                   "none: a Kubernetes-style tenant that only its pod's mount reaches")
      ->delimiter(',');
  c.update_cmd = tenant->add_subcommand("update", "Change a tenant's quota (the given flags only)");
  c.update_cmd->add_option("name", c.tenant_name, "Tenant name")->required();
  cli::add_quota_flags(*c.update_cmd, c.update_flags, cli::QuotaCommand::kUpdate);
  c.update_cmd
      ->add_option("--owner", c.owners,
                   "Replace the tenant's owners with these users (names or uids; repeatable, or a "
                   "comma list)")
      ->delimiter(',');
  c.delete_cmd = tenant->add_subcommand("delete", "Delete a tenant");
  c.delete_cmd->add_option("name", c.tenant_name, "Tenant name")->required();
  c.list_cmd = tenant->add_subcommand("list", "List tenants");
}

void define_set_and_top(CLI::App& app, Commands& c) {
  c.set_cmd = app.add_subcommand(
      "set", "Change a tenant's compute share, ceiling, priority or memory while it runs");
  c.set_cmd->add_option("name", c.tenant_name, "Tenant name")->required();
  cli::add_quota_flags(*c.set_cmd, c.set_flags, cli::QuotaCommand::kUpdate);
  c.set_cmd->footer(
      "Usage: fracgpu set TENANT [--compute N[%]] [--compute-limit N[%]|none] [--priority "
      "high|normal|low]\n"
      "                          [--memory SIZE] [--gpu INDEX]\n"
      "The same as `fracgpu tenant update`; the broker applies compute changes within 200 ms.");
  c.top_cmd = app.add_subcommand("top", "Live view of tenants, memory and measured compute shares");
  c.top_cmd->add_option("--interval", c.top.interval,
                        "Seconds between refreshes, 0.1-3600 (default 1)");
  c.top_cmd->add_option("--count", c.top.count, "Stop after N refreshes (default: until Ctrl-C)");
  c.top_cmd->add_flag("--once", c.top.once, "Print one frame and exit (for scripts)");
}

// "fracgpu 0.1.0 (commit d28724a3f0b1)": the same for --version and `version`.
std::string version_line() {
  return std::string("fracgpu ") + build_info::version() + " (commit " + build_info::commit() + ")";
}

int dispatch(Commands& c) {
  if (c.version_cmd->parsed()) {
    std::printf("%s\n", version_line().c_str());
    return 0;
  }
  if (c.demo_cmd != nullptr && c.demo_cmd->parsed()) return cli::run_demo();
  if (c.run_cmd->parsed()) {
    c.run.run_dir = c.run_dir;
    return cli::run_tenant_command(c.run);
  }
  if (c.status_cmd->parsed()) return cli::show_status(c.run_dir, c.status_json);
  if (c.set_cmd->parsed()) return cli::set_tenant(c.run_dir, c.tenant_name, c.set_flags);
  if (c.top_cmd->parsed()) return cli::run_top(c.run_dir, c.top);
  if (c.broker_cmd->parsed()) {
    c.broker.run_dir = c.run_dir;
    return broker::run_broker(std::move(c.broker));
  }
  if (c.create_cmd->parsed())
    return cli::create_tenant(c.run_dir, c.tenant_name, c.create_flags, c.owners);
  if (c.update_cmd->parsed())
    return cli::update_tenant(c.run_dir, c.tenant_name, c.update_flags, c.owners);
  if (c.delete_cmd->parsed()) return cli::delete_tenant(c.run_dir, c.tenant_name);
  if (c.list_cmd->parsed()) return cli::list_tenants(c.run_dir);
  return cli::kExitUsage;
}

// CLI11 reports an unknown command word as "A subcommand is required"; name the word.
std::string explain(CLI::App& app, const CLI::ParseError& e) {
  CLI::App* level = &app;
  for (CLI::App* sub = &app; sub != nullptr;) {
    level = sub;
    auto parsed = sub->get_subcommands();
    sub = parsed.empty() ? nullptr : parsed.front();
  }
  const auto extra = level->remaining();
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && !extra.empty()) {
    std::string names;
    for (const CLI::App* s : level->get_subcommands([](CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    return "unknown command '" + extra.front() + "'" +
           (names.empty() ? "" : " (commands: " + names + ")");
  }
  return e.what();
}

}  // namespace

int main(int argc, char** argv) {
  Commands c;
  CLI::App app{"fracgpu: fractions of a GPU with enforced memory caps and compute shares"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", version_line(), "Print the version and git commit, and exit");
  app.add_option("--run-dir", c.run_dir,
                 std::string("The broker's run directory (default ") + paths::kRunDir + ")")
      ->envname("FRACGPU_RUN_DIR");
  define_run(app, c);
  c.demo_cmd =
      app.add_subcommand("demo", "Show fracgpu on the simulated GPU (no NVIDIA GPU needed)");
  c.status_cmd = app.add_subcommand("status", "Show tenants, caps and usage");
  c.status_cmd->add_flag("--json", c.status_json, "Print the broker's JSON instead of a table");
  define_set_and_top(app, c);
  c.broker_cmd = app.add_subcommand("broker", "Run the node broker in the foreground");
  broker::add_broker_options(*c.broker_cmd, c.broker, /*with_run_dir=*/false);
  define_tenant(app, c);
  c.version_cmd = app.add_subcommand("version", "Print the version and git commit");
  const cli::RunSplit split = cli::split_run_command(app, *c.run_cmd, argc, argv);
  c.run.command = split.command;
  try {
    app.parse(split.parse_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fracgpu: %s (see fracgpu --help)\n", explain(app, e).c_str());
    return cli::kExitUsage;
  }
  return dispatch(c);
}
