// `fracgpu run`: run one command as a tenant. Validates every flag first, finds a
// broker (the node's, if its admin socket answers and accepts us; otherwise a private
// one that lives as long as the command — never beside a node broker for a user other
// than root or the broker's: cli/run_route.h), creates the tenant (owned by the caller's
// uid), registers this process on the tenant's socket for as long as the command runs
// (cli/tenant_membership.h), runs the command with the shim preloaded and pointed at the
// tenant's socket, and deletes the tenant afterwards. With --tenant NAME it joins the
// node's existing tenant NAME instead (no admin call, nothing created or deleted).
// Whatever the command leaves behind is kept and stopped (issue 27, row 5): this process
// is the command's child subreaper, moves into a cgroup of its own where the host allows
// it (run_cgroup.h) before it registers, and stops the descendants still alive when the
// command exits (descendant_stopper.h) before it leaves the tenant.
#pragma once

#include <string>
#include <vector>

#include "cli/cli_options.h"

namespace fracgpu::cli {

// Exit statuses of fracgpu's own failures, chosen outside the range commands use
// (like env(1) and docker run): 2 = bad usage, 125 = fracgpu could not run the command.
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFailure = 125;

struct RunRequest {
  QuotaFlags quota;
  std::string name;    // empty: run-<pid>
  std::string tenant;  // --tenant: join this existing tenant of the node broker
  std::vector<std::string> command;
  std::string run_dir;
  std::string cgroup = "auto";  // --cgroup auto|off
  double stop_grace_s = 5;      // --stop-grace: SIGTERM to leftovers, SIGKILL this much later
};

int run_tenant_command(const RunRequest& request);

// $FRACGPU_SHIM, else <dir of this executable>/../lib/libfracgpu.so (must exist).
Result<std::string> locate_shim();

}  // namespace fracgpu::cli
