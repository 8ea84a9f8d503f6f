// Implementation of BrokerConnection (see broker_connection.h). Nothing here is on a
// hot path: it runs at registration and when an allocation needs burst memory.
#include "core/broker_connection.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>

#include "fracgpu/descriptor_passing.h"
#include "fracgpu/protocol.h"

namespace fracgpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRefusalGraceMs = 200;
constexpr int kRetryPauseMs = 50;

int remaining_ms(Clock::time_point deadline) {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

std::string describe_errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

BrokerConnection::~BrokerConnection() {
  close();
}

bool BrokerConnection::connect(const std::string& socket_path, int timeout_ms, std::string* error) {
  std::lock_guard<std::mutex> lock(mutex_);
  sockaddr_un address{};
  if (socket_path.size() >= sizeof(address.sun_path)) {
    *error = "socket path too long: " + socket_path;
    return false;
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  const auto missing_deadline =
      start + std::chrono::milliseconds(std::min(timeout_ms, kMissingSocketGraceMs));
  for (;;) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = describe_errno("socket");
      return false;
    }
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = fd;
      buffered_.clear();
      return true;
    }
    const int err = errno;
    ::close(fd);
    // No such path at all: a broker restarting re-creates its socket within moments, so
    // only that long is worth waiting; a typo or a missing broker fails at once after it.
    const bool missing = err == ENOENT || err == ENOTDIR;
    if (missing) {
      *error = "no socket at " + socket_path + " (" + std::strerror(err) + ")";
    } else {
      *error = "connect " + socket_path + ": " + std::strerror(err);
    }
    const int left = remaining_ms(missing ? missing_deadline : deadline);
    if (left == 0) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left, kRetryPauseMs)));
  }
}

void BrokerConnection::adopt(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  buffered_.clear();
}

bool BrokerConnection::connected() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fd_ >= 0;
}

void BrokerConnection::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffered_.clear();
}

void BrokerConnection::forget_after_fork() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  buffered_.clear();
  new (&mutex_) std::mutex();  // the parent's lock state means nothing in the child
}

std::optional<uid_t> BrokerConnection::server_uid() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ucred cred{};
  socklen_t length = sizeof cred;
  if (fd_ < 0 || ::getsockopt(fd_, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0)
    return std::nullopt;
  return cred.uid;
}

std::optional<std::string> BrokerConnection::request(const std::string& line, int timeout_ms,
                                                     std::string* error, int* received_fd,
                                                     int* second_fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (received_fd != nullptr) *received_fd = -1;
  if (second_fd != nullptr) *second_fd = -1;
  if (fd_ < 0) {
    *error = "not connected to the broker";
    return std::nullopt;
  }
  std::optional<std::string> reply;
  if (send_all(line + "\n", timeout_ms, error)) {
    reply = read_line(timeout_ms, error, received_fd, second_fd);
  } else {
    // A broker that refuses a peer at accept writes its sentence and hangs up, and our send
    // may meet the hang-up first (EPIPE): that sentence, not "Broken pipe", is the answer.
    std::string unused;
    reply = read_line(kRefusalGraceMs, &unused, received_fd, second_fd);
  }
  if (!reply) {  // a broken exchange leaves the stream unusable: start over next time
    for (int* fd : {received_fd, second_fd}) {
      if (fd != nullptr && *fd >= 0) ::close(*fd);
      if (fd != nullptr) *fd = -1;
    }
    ::close(fd_);
    fd_ = -1;
    buffered_.clear();
  }
  return reply;
}

bool BrokerConnection::send_all(const std::string& data, int timeout_ms, std::string* error) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      *error = describe_errno("send to broker");
      return false;
    }
    pollfd p{fd_, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) == 0) {
      *error = "broker did not accept the request in time";
      return false;
    }
  }
  return true;
}

// One recvmsg(2): data into `chunk`, and passed descriptors (if any) into *received_fd and
// *second_fd, or closed when the caller did not ask for them or already has them.
ssize_t BrokerConnection::receive_chunk(char* chunk, std::size_t size, int* received_fd,
                                        int* second_fd) {
  return descriptor_passing::receive_with(fd_, chunk, size, received_fd, MSG_DONTWAIT, second_fd);
}

std::optional<std::string> BrokerConnection::read_line(int timeout_ms, std::string* error,
                                                       int* received_fd, int* second_fd) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::size_t newline = buffered_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    if (buffered_.size() > protocol::kMaxMessageBytes) {
      *error = "broker reply too long";
      return std::nullopt;
    }
    pollfd p{fd_, POLLIN, 0};
    int ready = ::poll(&p, 1, remaining_ms(deadline));
    if (ready == 0) {
      *error = "broker did not answer in time";
      return std::nullopt;
    }
    char chunk[4096];
    ssize_t n = receive_chunk(chunk, sizeof(chunk), received_fd, second_fd);
    if (n == 0) {
      *error = "broker closed the connection";
      return std::nullopt;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      *error = describe_errno("read from broker");
      return std::nullopt;
    }
    if (n > 0) buffered_.append(chunk, static_cast<std::size_t>(n));
  }
}

}  // namespace fracgpu
