// Doorbell: how a tenant's process tells the broker "look at my ledger now" — a
// one-byte datagram to <tenant dir>/doorbell, a Unix datagram socket the broker binds.
// It carries no data: the broker re-reads the tenant's shared state (threads waiting
// at the launch gate, drained epochs) whenever it rings. It is only rung on slow paths
// (a launch that must wait, a drain finished, the first launch after idling), never
// while a tenant holds the GPU. Addressed by path on every send, so it keeps working
// across broker restarts; a send never blocks and never raises SIGPIPE.
#pragma once

#include <atomic>
#include <string>

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

 private:
  std::string path_;
  std::atomic<int> fd_{-1};
};

}  // namespace fracgpu
