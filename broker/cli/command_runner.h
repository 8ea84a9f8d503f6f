// Running the user's command under `fracgpu run`: fork/exec with the extra environment
// (LD_PRELOAD of the shim, FRACGPU_SOCKET...), signal forwarding while it runs, and
// the shell-style exit status (the command's own, 128+N when killed by signal N,
// 127 when it cannot be found, 126 when it cannot be executed).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fracgpu::cli {

struct CommandResult {
  int exit_status = 0;
  std::string error;  // set when the command could not be started at all
};

// Runs `argv` (PATH-searched) with `env_overrides` applied over the current environment.
// SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to the CLI itself are forwarded to the command;
// those the terminal sends to the whole foreground group already reach it directly.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env_overrides);

// "<shim>" or "<shim>:<existing LD_PRELOAD>".
std::string prepend_preload(const std::string& shim, const char* existing);

}  // namespace fracgpu::cli
