// The limits of the broker's HTTP face (http_front.h) as pure decisions over explicit
// time, so they are tested with fake time: which connections are open, from which peer
// address, in which phase, and when each must be gone.
//
// What makes a trickle harmless: a connection's deadline is fixed when it is accepted
// (accept + head_timeout, the whole request head) and again once its head is complete
// (+ response_timeout, the render wait and the whole write); reading bytes never moves
// it, so one header byte a second buys nothing. What makes a flood harmless: at most
// max_per_peer connections per peer address and max_connections in all; a newcomer over
// either bound takes the place of the oldest connection (of that peer, or of anyone) that
// has still not sent a complete head, or, when every one has, of the oldest of all. A
// scraper's head arrives in one round trip, so it is never the oldest for long; and no
// set of connections, however patient, can keep a newcomer out.
//
// Costs: admit, add, complete, remove are O(log n); expired is O(k log n) for k expired.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fracgpu::broker {

using HttpClock = std::chrono::steady_clock;

struct HttpLimits {
  std::chrono::milliseconds head_timeout{2000};       // accept -> complete request head
  std::chrono::milliseconds response_timeout{10000};  // complete head -> last byte sent
  std::size_t max_connections = 1024;                 // open at once, all peers
  std::size_t max_per_peer = 16;                      // open at once, one peer address
  std::size_t max_head_bytes = 8192;                  // request line and header fields
};

class HttpConnectionBook {
 public:
  using Id = uint64_t;
  enum class Phase { kHead, kResponse };

  struct Admission {
    bool admit = false;       // false only with max_connections 0
    std::optional<Id> evict;  // admitted in place of this connection (close it first)
    std::string why;          // why the evicted one goes (or why refused)
  };

  explicit HttpConnectionBook(HttpLimits limits) : limits_(limits) {}

  const HttpLimits& limits() const { return limits_; }

  // Whether a connection from `peer` may be opened now (nothing is changed).
  Admission admit(const std::string& peer) const;

  void add(Id id, const std::string& peer, HttpClock::time_point now);
  // The head is complete: the connection's deadline becomes now + response_timeout.
  void complete_head(Id id, HttpClock::time_point now);
  void remove(Id id);

  // The connections whose deadline has passed, earliest first, with their phase.
  std::vector<std::pair<Id, Phase>> expired(HttpClock::time_point now) const;
  std::optional<HttpClock::time_point> next_deadline() const;

  std::size_t size() const { return conns_.size(); }
  std::size_t of_peer(const std::string& peer) const;
  std::optional<Phase> phase(Id id) const;
  const std::string* peer_of(Id id) const;

 private:
  struct Conn {
    std::string peer;
    Phase phase = Phase::kHead;
    HttpClock::time_point accepted, deadline;
  };
  using Order = std::set<std::pair<HttpClock::time_point, Id>>;
  struct PeerEntry {
    Order all;    // this peer's connections, oldest first
    Order heads;  // ... of them still in kHead
  };

  HttpLimits limits_;
  std::unordered_map<Id, Conn> conns_;
  std::unordered_map<std::string, PeerEntry> peers_;
  Order all_;        // every connection, oldest first
  Order heads_;      // ... of them still in kHead
  Order deadlines_;  // every connection, earliest deadline first
};

}  // namespace fracgpu::broker
