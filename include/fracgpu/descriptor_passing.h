// Passing file descriptors with stream data over a Unix socket (SCM_RIGHTS): the broker
// sends a tenant's ledger (and, for a tenant with owners, its quota, read-only) with the
// register reply, the shim (and the tests' fake tenant processes) receive them. Header-only, so
// that the shim and the broker each compile it into their own binary. Not on a hot path: used once
// per registration.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>

namespace fracgpu::descriptor_passing {

inline constexpr std::size_t kMaxPassed = 2;

// One sendmsg(2) of `size` bytes with `count` (1..kMaxPassed) descriptors attached, in
// order (they travel with the first byte the kernel takes). Returns what sendmsg returns;
// the descriptors stay the caller's.
inline ssize_t send_with(int socket, const void* data, std::size_t size, const int* fds,
                         std::size_t count, int flags) {
  iovec part{const_cast<void*>(data), size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassed)] = {};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(header), fds, sizeof(int) * count);
  return ::sendmsg(socket, &message, flags);
}

inline ssize_t send_with(int socket, const void* data, std::size_t size, int fd, int flags) {
  return send_with(socket, data, size, &fd, 1, flags);
}

// One recvmsg(2) into `buffer` (close-on-exec for passed descriptors). The first passed
// descriptor goes to *received when received is non-null and *received < 0, the second to
// *second likewise; every other one is closed, so nothing a peer sends can leak
// descriptors into this process.
inline ssize_t receive_with(int socket, void* buffer, std::size_t size, int* received, int flags,
                            int* second = nullptr) {
  iovec part{buffer, size};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(socket, &message, flags | MSG_CMSG_CLOEXEC);
  for (cmsghdr* h = CMSG_FIRSTHDR(&message); n >= 0 && h != nullptr; h = CMSG_NXTHDR(&message, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int passed = -1;
      std::memcpy(&passed, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
      if (received != nullptr && *received < 0) {
        *received = passed;
      } else if (received != nullptr && second != nullptr && *second < 0) {
        *second = passed;
      } else {
        ::close(passed);
      }
    }
  }
  return n;
}

}  // namespace fracgpu::descriptor_passing
