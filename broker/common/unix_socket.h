// Unix stream socket helpers shared by the broker's servers and the CLI's client:
// binding a listening socket (replacing a stale socket file, never another kind of
// file) that appears at its path only with its final mode and owner, connecting with a
// timeout, and the kernel's view of the peer (SO_PEERCRED), which is the only identity
// the broker trusts.
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

// Non-blocking, close-on-exec listening socket at `path` with file mode `mode`, owned by
// `owner` when given (chown needs root or that uid). The socket is bound in a private
// 0700 directory beside `path`, given its mode and owner there, and renamed into place:
// it is never reachable with the umask's mode or the wrong owner.
Result<int> listen_unix(const std::filesystem::path& path, mode_t mode,
                        std::optional<uid_t> owner = std::nullopt);

// Changes the mode and owner of an existing socket file without a moment of looser
// access: 0600 first, then the owner, then `mode`.
Status set_socket_access(const std::filesystem::path& path, mode_t mode,
                         std::optional<uid_t> owner);

// Blocking connected socket (close-on-exec); fails after `timeout`.
Result<int> connect_unix(const std::filesystem::path& path, std::chrono::milliseconds timeout);

std::optional<PeerCredentials> peer_credentials(int fd);

bool set_nonblocking(int fd);

}  // namespace fracgpu::broker
