// Sending side of the broker's doorbell (see doorbell.h).
#include "core/doorbell.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace fracgpu {

Doorbell::~Doorbell() {
  const int fd = fd_.exchange(-1);
  if (fd >= 0) ::close(fd);
}

bool Doorbell::ring() noexcept {
  sockaddr_un address{};
  if (path_.empty() || path_.size() >= sizeof(address.sun_path)) return false;
  int fd = fd_.load(std::memory_order_acquire);
  if (fd < 0) {
    const int created = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (created < 0) return false;
    int expected = -1;
    if (fd_.compare_exchange_strong(expected, created)) {
      fd = created;
    } else {  // another thread created one first
      ::close(created);
      fd = expected;
    }
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path_.c_str(), path_.size() + 1);
  const char byte = 1;
  const ssize_t sent = ::sendto(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                                reinterpret_cast<sockaddr*>(&address), sizeof(address));
  return sent == 1 || errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS;
}

}  // namespace fracgpu
