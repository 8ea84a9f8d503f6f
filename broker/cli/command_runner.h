// Running the user's command under `fracgpu run`: fork/exec with the extra environment
// (LD_PRELOAD of the shim, FRACGPU_SOCKET...), signal forwarding while it runs, and
// the shell-style exit status (the command's own, 128+N when killed by signal N,
// 127 when it cannot be found, 126 when it cannot be executed).
// With Supervision::keep_descendants (what `fracgpu run` does), this process is the
// command's child subreaper (PR_SET_CHILD_SUBREAPER) while it runs: an orphan anywhere
// below — a double-forked `setsid` daemon — is reparented here rather than to init, so it
// stays a descendant of this registered process for the broker's audit; orphans that exit
// meanwhile are reaped at their SIGCHLD. When the command exits, the descendants still
// alive are stopped (descendant_stopper.h: SIGTERM, SIGKILL after the grace).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/descendant_stopper.h"

namespace fracgpu::cli {

struct CommandResult {
  int exit_status = 0;
  std::string error;    // set when the command could not be started at all
  StopOutcome stopped;  // what was left behind and stopped (keep_descendants)
};

struct Supervision {
  bool keep_descendants = false;
  std::chrono::milliseconds grace{5000};
  std::vector<pid_t> excluded;                      // children of ours that are not the run's
  std::function<std::vector<pid_t>()> cgroup_pids;  // the run's own cgroup, when it has one
};

// Runs `argv` (PATH-searched) with `env_overrides` applied over the current environment.
// SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to the CLI itself are forwarded to the command;
// those the terminal sends to the whole foreground group already reach it directly.
// After the command exited, the same signals end the stopper's grace at once.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env_overrides,
                          const Supervision& supervision = {});

// "<shim>" or "<shim>:<existing LD_PRELOAD>".
std::string prepend_preload(const std::string& shim, const char* existing);

}  // namespace fracgpu::cli
