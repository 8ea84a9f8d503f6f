// The CUDA_MPS_* variables a tenant's process exports when its broker runs MPS
// (protocol.h, register reply minor 1): where the broker's MPS server is, and the
// process's client priority. The decision is here, pure and testable (getenv and the
// directory check are injected); the preload layer applies it with setenv right after
// registering, which happens at the shim's first CUDA call and so before the driver's
// own cuInit reads the variables. The tenant's own values are overridden, with one
// warning each: a tenant must not pick its MPS server (it would leave fracgpu's shared
// server, or join another tenant's) nor its priority. Runs once per process.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fracgpu {

// From the register reply; an empty pipe_dir means "not an MPS client".
struct MpsClientSettings {
  std::string pipe_dir;
  std::string log_dir;
  int priority = 1;  // CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal
};

struct MpsEnvironment {
  std::vector<std::pair<std::string, std::string>> set;  // name, value: setenv in this order
  std::vector<std::string> warnings;                     // one log line each
};

using GetEnv = const char* (*)(const char* name);
using IsDirectory = bool (*)(const std::string& path);

// `container_pipe_dir` is where a pod sees the broker's pipe directory
// (paths::kContainerMpsPipeDir): used when the host path the broker named is not
// visible to this process. Neither visible: nothing is set, one warning says why.
MpsEnvironment mps_environment(const MpsClientSettings& settings, GetEnv get_env,
                               IsDirectory is_directory, const std::string& container_pipe_dir);

}  // namespace fracgpu
