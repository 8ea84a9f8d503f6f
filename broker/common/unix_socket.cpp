// Socket plumbing for unix_socket.h. The socket file gets its mode with chmod after
// bind (bind honours the umask), since tenants of any uid must be able to connect.
// Clients use socket timeouts so that a wedged broker cannot hang the CLI.
#include "common/unix_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fracgpu::broker {
namespace {

Result<sockaddr_un> make_address(const std::filesystem::path& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.native().size() >= sizeof addr.sun_path) {
    return Result<sockaddr_un>::failure("socket path " + path.string() +
                                        " is too long for a Unix socket");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.native().size() + 1);
  return addr;
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Removes an old socket file at `path`; refuses to touch anything that is not a socket.
Status clear_stale_socket(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) return Status::failure(path.string() + " exists and is not a socket");
  if (::unlink(path.c_str()) != 0)
    return Status::failure(errno_text("cannot remove stale socket " + path.string()));
  return {};
}

}  // namespace

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

Result<int> listen_unix(const std::filesystem::path& path, mode_t mode) {
  auto addr = make_address(path);
  if (!addr) return Result<int>::failure(addr.error());
  if (auto s = clear_stale_socket(path); !s) return Result<int>::failure(s.error());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Result<int>::failure(errno_text("socket"));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_un)) != 0 ||
      ::chmod(path.c_str(), mode) != 0 || ::listen(fd, 256) != 0) {
    const std::string why = errno_text("cannot listen on " + path.string());
    ::close(fd);
    return Result<int>::failure(why);
  }
  return fd;
}

Result<int> connect_unix(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  auto addr = make_address(path);
  if (!addr) return Result<int>::failure(addr.error());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Result<int>::failure(errno_text("socket"));
  // A Unix-socket connect blocks only while the listener's backlog is full, and honours
  // SO_SNDTIMEO; the same timeouts then bound every later send/recv of the client.
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_un)) != 0) {
    const std::string why = errno_text("cannot connect to " + path.string());
    ::close(fd);
    return Result<int>::failure(why);
  }
  return fd;
}

std::optional<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

}  // namespace fracgpu::broker
