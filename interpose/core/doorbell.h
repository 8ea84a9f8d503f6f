// Doorbell: how a tenant's process tells the broker "look at my ledger now" — a
// one-byte datagram to <tenant dir>/doorbell, a Unix datagram socket the broker binds.
// It carries no data: the broker re-reads the tenant's shared state (threads waiting
// at the launch gate, drained epochs) whenever it rings. It is only rung on slow paths
// (a launch that must wait, a drain finished, the first launch after idling), never
// while a tenant holds the GPU. Addressed by path on every send, so it keeps working
// across broker restarts; a send never blocks and never raises SIGPIPE.
// listening() asks, without sending anything, whether a broker is bound to the path: a
// broker that died leaves the file unbound (ECONNREFUSED) or removed (ENOENT), so a
// waiting launch sees its death with one connect() (~2 us), never on the fast path.
#pragma once

#include <atomic>
#include <string>

struct sockaddr_un;

namespace fracgpu {

class Doorbell {
 public:
  Doorbell() = default;
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // `path` is the broker's datagram socket; the descriptor is created on first ring.
  void set_path(std::string path) { path_ = std::move(path); }
  const std::string& path() const { return path_; }

  // False when nobody listens (no broker bound to the path); true when delivered or
  // when the broker's queue is merely full (it is awake and will look anyway).
  bool ring() noexcept;
  // False when nobody is bound to the path (the broker died or is not there yet). Sends
  // nothing, so the broker does not wake for it.
  bool listening() noexcept;

 private:
  int socket_in(std::atomic<int>& slot) noexcept;  // created on first use
  bool address(::sockaddr_un* out) const noexcept;

  std::string path_;
  std::atomic<int> fd_{-1};
  std::atomic<int> probe_fd_{-1};  // connect()ed to probe; a separate descriptor from fd_
};

}  // namespace fracgpu
