// Sending side of the broker's doorbell and its liveness probe (see doorbell.h).
#include "core/doorbell.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fracgpu {

Doorbell::~Doorbell() {
  for (std::atomic<int>* slot : {&fd_, &probe_fd_}) {
    const int fd = slot->exchange(-1);
    if (fd >= 0) ::close(fd);
  }
}

int Doorbell::socket_in(std::atomic<int>& slot) noexcept {
  int fd = slot.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  const int created = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (created < 0) return -1;
  int expected = -1;
  if (slot.compare_exchange_strong(expected, created)) return created;
  ::close(created);  // another thread created one first
  return expected;
}

bool Doorbell::address(sockaddr_un* out) const noexcept {
  *out = sockaddr_un{};
  if (path_.empty() || path_.size() >= sizeof(out->sun_path)) return false;
  out->sun_family = AF_UNIX;
  std::memcpy(out->sun_path, path_.c_str(), path_.size() + 1);
  return true;
}

bool Doorbell::ring() noexcept {
  sockaddr_un address{};
  if (!this->address(&address)) return false;
  const int fd = socket_in(fd_);
  if (fd < 0) return false;
  const char byte = 1;
  const ssize_t sent = ::sendto(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                                reinterpret_cast<sockaddr*>(&address), sizeof(address));
  return sent == 1 || errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS;
}

// A datagram connect() only looks the path up and checks that a socket is bound there.
bool Doorbell::listening() noexcept {
  sockaddr_un address{};
  if (!this->address(&address)) return false;
  const int fd = socket_in(probe_fd_);
  if (fd < 0) return true;  // cannot tell: do not fail open on a descriptor shortage
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return true;
  return errno != ECONNREFUSED && errno != ENOENT && errno != ENOTDIR;
}

}  // namespace fracgpu
