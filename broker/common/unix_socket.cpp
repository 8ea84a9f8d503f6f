// Socket plumbing for unix_socket.h. bind() creates the socket file with the umask's
// mode and the caller's uid, and chmod/chown can only follow; so the file is bound in a
// fresh 0700 directory nobody else can enter, fixed there, and renamed over `path`
// (rename is atomic and replaces a stale socket without a moment of no socket). A
// fchmod of the descriptor before bind would fix the mode (Linux masks the sockfs
// inode's mode with the umask at bind), but nothing before bind sets the file's owner,
// and a chown after it would leave a moment with the broker's uid on a 0600 socket
// (refusing the owner's connect) or with a looser mode. The directory costs two system
// calls at broker start and tenant creation, nothing per connection.
// Clients use socket timeouts so that a wedged broker cannot hang the CLI.
#include "common/unix_socket.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

// Refuses to replace anything at `path` that is not a socket (a stale one is replaced).
Status check_replaceable(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) return Status::failure(path.string() + " exists and is not a socket");
  return {};
}

Status apply_access(const std::filesystem::path& path, mode_t mode, std::optional<uid_t> owner) {
  if (::chmod(path.c_str(), 0600) != 0)
    return Status::failure(errno_text("chmod " + path.string()));
  if (owner && ::lchown(path.c_str(), *owner, static_cast<gid_t>(-1)) != 0)
    return Status::failure(
        errno_text("cannot give " + path.string() + " to uid " + std::to_string(*owner)));
  if (::chmod(path.c_str(), mode) != 0)
    return Status::failure(errno_text("chmod " + path.string()));
  return {};
}

// A private directory beside `path` to bind in, or "" when none can be made (or the
// socket path inside it would not fit sun_path).
std::string private_bind_dir(const std::filesystem::path& path) {
  std::string pattern = (path.parent_path() / ".sXXXXXX").string();
  if (pattern.size() + 2 >= sizeof(sockaddr_un{}.sun_path)) return "";
  if (::mkdtemp(pattern.data()) == nullptr) return "";
  ::chmod(pattern.c_str(), 0700);
  return pattern;
}

}  // namespace

bool set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

Result<int> listen_unix(const std::filesystem::path& path, mode_t mode,
                        std::optional<uid_t> owner) {
  auto addr = make_address(path);
  if (!addr) return Result<int>::failure(addr.error());
  if (auto s = check_replaceable(path); !s) return Result<int>::failure(s.error());
  const std::string dir = private_bind_dir(path);
  if (dir.empty())
    return Result<int>::failure(
        errno_text("cannot make a private directory beside " + path.string()));
  const std::filesystem::path staged = std::filesystem::path(dir) / "s";
  auto staged_addr = make_address(staged);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  Status status;
  if (!staged_addr) {
    status = Status::failure(staged_addr.error());
  } else if (fd < 0) {
    status = Status::failure(errno_text("socket"));
  } else if (::bind(fd, reinterpret_cast<const sockaddr*>(&*staged_addr), sizeof(sockaddr_un)) !=
             0) {
    status = Status::failure(errno_text("cannot bind a socket for " + path.string()));
  } else if (auto access = apply_access(staged, mode, owner); !access) {
    status = access;
  } else if (::listen(fd, 256) != 0) {
    status = Status::failure(errno_text("cannot listen on " + path.string()));
  } else if (::rename(staged.c_str(), path.c_str()) != 0) {
    status = Status::failure(errno_text("cannot move the socket to " + path.string()));
  }
  ::unlink(staged.c_str());  // only still there when something failed
  ::rmdir(dir.c_str());
  if (!status) {
    if (fd >= 0) ::close(fd);
    return Result<int>::failure(status.error());
  }
  return fd;
}

Status set_socket_access(const std::filesystem::path& path, mode_t mode,
                         std::optional<uid_t> owner) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
    return Status::failure(path.string() + " is not a socket");
  return apply_access(path, mode, owner);
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
