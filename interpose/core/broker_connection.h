// BrokerConnection: the shim's side of the tenant socket — connect, send one JSON line,
// read one JSON line back, all with deadlines so that a hung or vanished broker turns
// into an error the caller can report, never into a hung application. The socket is
// close-on-exec and the connection stays open for the life of the process: its
// hang-up is one of the ways the broker learns that the process is gone.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <optional>
#include <string>

namespace fracgpu {

class BrokerConnection {
 public:
  BrokerConnection() = default;
  ~BrokerConnection();
  BrokerConnection(const BrokerConnection&) = delete;
  BrokerConnection& operator=(const BrokerConnection&) = delete;

  // Connects to the Unix socket, retrying until `timeout_ms` passes (a broker that is
  // restarting refuses for a while). A path that does not exist at all is retried only
  // for kMissingSocketGraceMs (the moment a restarting broker takes to bind again), so a
  // process pointed at a missing socket fails closed within a second, the error naming
  // the path (issue 27, row 7).
  bool connect(const std::string& socket_path, int timeout_ms, std::string* error);
  static constexpr int kMissingSocketGraceMs = 500;
  // For tests: take an already connected descriptor.
  void adopt(int fd);
  bool connected() const;
  void close();
  // In a child after fork(): drops the inherited descriptor without touching the mutex,
  // which another thread of the parent may have held at the fork (it is re-created).
  void forget_after_fork();

  // One request line out, one reply line back (without the newline). A descriptor the
  // broker passed with the reply (SCM_RIGHTS) lands in *received_fd (close-on-exec; -1
  // when none came), a second one in *second_fd (a host tenant's quota); without them,
  // any passed descriptor is closed.
  std::optional<std::string> request(const std::string& line, int timeout_ms, std::string* error,
                                     int* received_fd = nullptr, int* second_fd = nullptr);

  // The uid of the process serving the socket (SO_PEERCRED), while connected.
  std::optional<uid_t> server_uid() const;

 private:
  bool send_all(const std::string& data, int timeout_ms, std::string* error);
  std::optional<std::string> read_line(int timeout_ms, std::string* error, int* received_fd,
                                       int* second_fd);
  ssize_t receive_chunk(char* chunk, std::size_t size, int* received_fd, int* second_fd);

  mutable std::mutex mutex_;
  int fd_ = -1;
  std::string buffered_;
};

}  // namespace fracgpu
