// The MPS client environment of a tenant process (see mps_client_env.h).
#include "core/mps_client_env.h"

namespace fracgpu {
namespace {

// Overrides `name` with `value`, warning when the process had set something else.
void override_variable(MpsEnvironment& out, GetEnv get_env, const char* name,
                       const std::string& value, const char* why) {
  const char* current = get_env(name);
  if (current != nullptr && *current != '\0' && value != current)
    out.warnings.push_back(std::string(name) + "=" + current + " is overridden with " + value +
                           ": " + why);
  out.set.emplace_back(name, value);
}

}  // namespace

MpsEnvironment mps_environment(const MpsClientSettings& settings, GetEnv get_env,
                               IsDirectory is_directory, const std::string& container_pipe_dir) {
  MpsEnvironment out;
  if (settings.pipe_dir.empty()) return out;
  std::string pipe = settings.pipe_dir;
  std::string log = settings.log_dir;
  if (!is_directory(pipe)) {
    if (container_pipe_dir.empty() || !is_directory(container_pipe_dir)) {
      out.warnings.push_back("the broker runs MPS, but its pipe directory " + pipe +
                             " is not visible to this process (in a pod it must be mounted at " +
                             container_pipe_dir + "); this process time-slices instead");
      return out;
    }
    pipe = container_pipe_dir;
    log.clear();  // the daemon writes the logs; clients need only the pipe directory
  }
  override_variable(out, get_env, "CUDA_MPS_PIPE_DIRECTORY", pipe,
                    "the node's broker decides which MPS server a tenant uses");
  if (!log.empty()) out.set.emplace_back("CUDA_MPS_LOG_DIRECTORY", log);
  override_variable(out, get_env, "CUDA_MPS_CLIENT_PRIORITY",
                    std::to_string(settings.priority == 0 ? 0 : 1),
                    "the tenant's priority class decides its MPS client priority");
  return out;
}

}  // namespace fracgpu
