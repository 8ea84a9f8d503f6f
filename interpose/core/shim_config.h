// The shim's whole configuration, read once at the first CUDA call: the FRACGPU_*
// environment, and the facts about the node that decide how much of it counts
// (core/injection_policy.h). Parsing takes a lookup function instead of calling getenv
// directly, and the node's facts are read from paths given as parameters (the shim passes
// the node's constants, fracgpu/paths.h), so tests can feed any environment and any
// layout; bad values are reported and ignored (the shim never refuses to run the
// application over its own configuration). Cost: a few stat/open calls, once.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/shim_log.h"
#include "fracgpu/paths.h"

namespace fracgpu {

struct ShimConfig {
  bool disabled = false;                 // FRACGPU_DISABLE=1: pure pass-through (if allowed)
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

// Where the node keeps what the shim looks at: the constants in the shim; a test's own
// files in unit tests. Nothing a tenant sets can change them.
struct NodePaths {
  std::string default_socket = paths::kDefaultTenantSocket;
  std::string run_dir = paths::kRunDir;
  std::string preload_file = "/etc/ld.so.preload";
};

// What the node has set up, as this process sees it.
struct NodeFacts {
  bool pod_socket = false;         // default_socket exists and is a socket: a pod's mount
  bool preloaded_by_node = false;  // preload_file names this very shim (same real path)
  // A node broker has served run_dir since boot: its broker.lock exists (the broker creates
  // it, and /run is root's, so no other uid can). Its owner is the broker's uid. The file
  // outlives a restart, so the rules hold while the broker restarts, too.
  std::optional<uid_t> node_broker_uid;
};

// `self_path` is where this shim was loaded from (dladdr), "" if unknown.
NodeFacts read_node_facts(const NodePaths& paths, const std::string& self_path);

// True when `preload_contents` (an ld.so.preload file: names separated by white space or
// ':') names a file whose real path is `self_real_path`.
bool preload_names(const std::string& preload_contents, const std::string& self_real_path);

// One entry of a path as inspect_path saw it.
struct PathEntry {
  std::string path;
  uid_t uid = 0;
  mode_t mode = 0;
};

// The real path of `path` (symbolic links resolved) in *canonical, and "/" and every
// entry on the way down to it in *entries. False, with the reason in *error, when it
// cannot be resolved or an entry cannot be examined.
bool inspect_path(const std::string& path, std::string* canonical, std::vector<PathEntry>* entries,
                  std::string* error);

}  // namespace fracgpu
