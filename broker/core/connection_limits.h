// The limits every LineServer socket enforces, as pure decisions over explicit time and
// counts (no syscalls, so they are tested with fake time): who may open one more
// connection (per-uid and per-server caps, a room only privileged peers may use, head
// room below the process's descriptor limit), how fast non-privileged peers are
// admitted (token buckets), when a connection is idle, how long to stop accepting after
// EMFILE, and how often a refusal may be logged. LineServer asks these once per accepted
// connection and once per sweep; each answer is O(1).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace fracgpu::broker {

using LimitClock = std::chrono::steady_clock;

struct ConnectionLimits {
  // Privileged peers (root and the broker's effective uid) bypass the per-uid cap, the
  // admission rate and the descriptor head room, and may use `privileged_reserve`
  // connections beyond `max_connections`. Only for the control plane: on a tenant socket
  // root is just a tenant (a pod runs as root by default), so it is off there.
  bool exempt_privileged = false;
  std::size_t max_per_uid = 600;        // open connections per uid (kMaxProcesses is 512)
  std::size_t max_connections = 4096;   // open connections a non-privileged peer may join
  std::size_t privileged_reserve = 64;  // room above max_connections for privileged peers
  // Non-privileged peers are refused once the descriptor accept() returned is this close
  // to RLIMIT_NOFILE (capped at a quarter of the limit), so a flood never takes the
  // broker to EMFILE: the rest stays for pidfds, the admin socket and tenant creation.
  std::size_t fd_headroom = 64;
  // A connection that holds no process slot and has not completed a request for this
  // long is closed (registered processes keep theirs for life).
  std::chrono::milliseconds idle_timeout{10'000};
  // Token buckets for non-privileged peers: admitted connections (the registration rate
  // of a tenant socket) and refused ones (what a flood of refusals may cost). When either
  // is empty the listener is paused until a token is due; peers wait in the backlog.
  double admit_rate = 128, admit_burst = 256;
  double refuse_rate = 1024, refuse_burst = 1024;
  // At EMFILE, give up the process's spare descriptor to accept one pending peer: served
  // if privileged, told why and closed otherwise (the admin socket).
  bool use_spare_fd = false;

  static ConnectionLimits tenant_socket() { return {}; }
  static ConnectionLimits admin_socket();
};

// Everything LineServer knows about a connection it has just accepted.
struct AcceptFacts {
  uid_t uid = 0;
  bool privileged = false;
  int fd = -1;                      // the descriptor accept() returned
  uint64_t fd_limit = 0;            // RLIMIT_NOFILE soft limit (0: unknown)
  bool out_of_descriptors = false;  // accepted through the spare descriptor
  std::size_t open_total = 0;       // connections this server holds now
  std::size_t open_of_uid = 0;      // ... of them from `uid`
};

bool is_privileged(const ConnectionLimits& limits, uid_t uid, uid_t broker_euid);

// nullopt admits; otherwise the sentence the peer is told before it is closed.
std::optional<std::string> admission_refusal(const ConnectionLimits& limits,
                                             const AcceptFacts& facts);

// The descriptors below the soft limit that non-privileged peers may not take.
uint64_t effective_fd_headroom(const ConnectionLimits& limits, uint64_t fd_limit);

bool idle_expired(const ConnectionLimits& limits, LimitClock::time_point last_request,
                  LimitClock::time_point now, bool holds_slot);

// Open connections per uid of one server.
class UidCounts {
 public:
  void add(uid_t uid) { ++counts_[uid]; }
  void remove(uid_t uid);
  std::size_t of(uid_t uid) const;
  std::size_t uids() const { return counts_.size(); }

 private:
  std::unordered_map<uid_t, std::size_t> counts_;
};

// A token bucket: `burst` tokens at most, refilled at `rate` per second. rate <= 0
// means unlimited.
class TokenBucket {
 public:
  TokenBucket(double rate, double burst, LimitClock::time_point now);
  bool available(LimitClock::time_point now);  // at least one whole token
  bool take(LimitClock::time_point now);       // takes one if available
  // When the next whole token is due (now if one is available).
  LimitClock::time_point next_token(LimitClock::time_point now);
  bool unlimited() const { return rate_ <= 0; }

 private:
  void refill(LimitClock::time_point now);
  double rate_, burst_, tokens_;
  LimitClock::time_point last_;
};

// Exponential backoff for re-arming a listener after EMFILE/ENFILE.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds first, std::chrono::milliseconds max)
      : first_(first), max_(max), next_(first) {}
  std::chrono::milliseconds next();  // the delay to use now; doubles the following one
  void reset() { next_ = first_; }

 private:
  std::chrono::milliseconds first_, max_, next_;
};

// At most one log line per `interval`; the events in between are counted, so the next
// line (or a flush) can say how many were not logged.
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::milliseconds interval) : interval_(interval) {}
  // Counts `count` events. True when they may be logged now; *suppressed then holds the
  // events not logged since the previous line.
  bool admit(LimitClock::time_point now, uint64_t* suppressed, uint64_t count = 1);
  // The events not logged, once `interval` has passed since the last line (0 if none or
  // too early); a periodic sweep writes them as one summary line.
  uint64_t flush(LimitClock::time_point now);
  bool pending() const { return suppressed_ > 0; }

 private:
  std::chrono::milliseconds interval_;
  std::optional<LimitClock::time_point> last_line_;
  uint64_t suppressed_ = 0;
};

}  // namespace fracgpu::broker
