// Whether a broker has served a run directory, as the shim and the CLI both need to know
// (the shim: is FRACGPU_SOCKET the node's? the CLI: may `fracgpu run` start a private
// broker?). The fact is the broker's lock file: the broker creates <run dir>/broker.lock on
// start and leaves it there, so it outlives restarts (the rules hold while the broker
// restarts), and under /run only root can create it; its owner is the broker's uid.
// One stat(2); header-only, so the shim and the CLI each compile it into their own binary.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>

#include "fracgpu/paths.h"

namespace fracgpu {

// The uid of the broker that has served `run_dir`, or nullopt when none has.
inline std::optional<uid_t> node_broker_uid(const std::string& run_dir) {
  const std::string lock = run_dir + "/" + paths::kBrokerLockName;
  struct stat st {};
  if (::stat(lock.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return st.st_uid;
}

}  // namespace fracgpu
