// `fracgpu run`: run one command as a tenant. Validates every flag first, finds a
// broker (the node's, if its admin socket answers and accepts us; otherwise a private
// one that lives as long as the command), creates the tenant, runs the command with the
// shim preloaded and pointed at the tenant's socket, and deletes the tenant afterwards.
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
  std::string name;  // empty: run-<pid>
  std::vector<std::string> command;
  std::string run_dir;
};

int run_tenant_command(const RunRequest& request);

// $FRACGPU_SHIM, else <dir of this executable>/../lib/libfracgpu.so (must exist).
Result<std::string> locate_shim();

}  // namespace fracgpu::cli
