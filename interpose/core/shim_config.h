// The shim's whole configuration, read once from FRACGPU_* environment variables at
// the first CUDA call. Parsing takes a lookup function instead of calling getenv
// directly, so tests can feed any environment; bad values are reported and ignored
// (the shim never refuses to run the application over its own configuration).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/shim_log.h"
#include "fracgpu/paths.h"

namespace fracgpu {

struct ShimConfig {
  bool disabled = false;                 // FRACGPU_DISABLE=1: pure pass-through
  LogLevel log_level = LogLevel::kWarn;  // FRACGPU_LOG_LEVEL
  std::string real_driver;               // FRACGPU_REAL_DRIVER: path of the real libcuda.so.1
  std::string hook_stats_path;           // FRACGPU_HOOK_STATS: write per-hook call counts at exit
  std::string socket_path{paths::kDefaultTenantSocket};  // FRACGPU_SOCKET
  bool socket_explicit = false;       // FRACGPU_SOCKET was set: the broker must answer
  std::vector<std::string> problems;  // one message per rejected variable
};

using EnvLookup = std::function<const char*(const char*)>;

ShimConfig parse_shim_config(const EnvLookup& lookup);
ShimConfig shim_config_from_environment();

// "%p" in a stats path becomes the process id, so every process of a job gets its file.
std::string expand_pid_pattern(const std::string& pattern, int pid);

}  // namespace fracgpu
