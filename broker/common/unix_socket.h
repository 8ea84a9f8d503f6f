// Unix stream socket helpers shared by the broker's servers and the CLI's client:
// binding a listening socket (replacing a stale socket file, never another kind of
// file), connecting with a timeout, and the kernel's view of the peer (SO_PEERCRED),
// which is the only identity the broker trusts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "common/result.h"

namespace fracgpu::broker {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Non-blocking, close-on-exec listening socket at `path` with file mode `mode`.
Result<int> listen_unix(const std::filesystem::path& path, mode_t mode);

// Blocking connected socket (close-on-exec); fails after `timeout`.
Result<int> connect_unix(const std::filesystem::path& path, std::chrono::milliseconds timeout);

std::optional<PeerCredentials> peer_credentials(int fd);

bool set_nonblocking(int fd);

}  // namespace fracgpu::broker
