// Decisions of connection_limits.h. The order of checks in admission_refusal is the order
// of what a peer most needs to hear: a broker out of descriptors first (nothing else
// matters then), then the server's cap, then the peer's own share.
#include "core/connection_limits.h"

#include <algorithm>

namespace fracgpu::broker {
namespace {

constexpr double kWhole = 1.0 - 1e-9;  // a token, give or take floating-point dust

}  // namespace

ConnectionLimits ConnectionLimits::admin_socket() {
  ConnectionLimits limits;
  limits.exempt_privileged = true;
  limits.max_per_uid = 16;  // only privileged peers pass the admin socket's filter anyway
  limits.max_connections = 1024;
  limits.privileged_reserve = 64;
  limits.idle_timeout = std::chrono::seconds(60);
  limits.use_spare_fd = true;
  return limits;
}

bool is_privileged(const ConnectionLimits& limits, uid_t uid, uid_t broker_euid) {
  return limits.exempt_privileged && (uid == 0 || uid == broker_euid);
}

uint64_t effective_fd_headroom(const ConnectionLimits& limits, uint64_t fd_limit) {
  return std::min<uint64_t>(limits.fd_headroom, fd_limit / 4);
}

std::optional<std::string> admission_refusal(const ConnectionLimits& limits,
                                             const AcceptFacts& facts) {
  if (facts.privileged) {
    if (facts.open_total >= limits.max_connections + limits.privileged_reserve)
      return "this socket has its maximum of " +
             std::to_string(limits.max_connections + limits.privileged_reserve) +
             " connections; try again later";
    return std::nullopt;
  }
  if (facts.out_of_descriptors)
    return std::string("the broker is out of file descriptors; try again later");
  // accept() returns the lowest free descriptor, so every one below facts.fd is in use.
  if (facts.fd_limit > 0 && facts.fd >= 0 &&
      static_cast<uint64_t>(facts.fd) + effective_fd_headroom(limits, facts.fd_limit) >=
          facts.fd_limit)
    return "the broker is short of file descriptors (" + std::to_string(facts.fd + 1) + " of " +
           std::to_string(facts.fd_limit) + " in use); try again later";
  if (facts.open_total >= limits.max_connections)
    return "this socket has its maximum of " + std::to_string(limits.max_connections) +
           " connections; try again later";
  if (facts.open_of_uid >= limits.max_per_uid)
    return "uid " + std::to_string(facts.uid) + " already has " +
           std::to_string(facts.open_of_uid) + " connections to this socket (the limit is " +
           std::to_string(limits.max_per_uid) + ")";
  return std::nullopt;
}

bool idle_expired(const ConnectionLimits& limits, LimitClock::time_point last_request,
                  LimitClock::time_point now, bool holds_slot) {
  return !holds_slot && now - last_request >= limits.idle_timeout;
}

void UidCounts::remove(uid_t uid) {
  auto it = counts_.find(uid);
  if (it == counts_.end()) return;
  if (--it->second == 0) counts_.erase(it);
}

std::size_t UidCounts::of(uid_t uid) const {
  auto it = counts_.find(uid);
  return it == counts_.end() ? 0 : it->second;
}

TokenBucket::TokenBucket(double rate, double burst, LimitClock::time_point now)
    : rate_(rate), burst_(std::max(burst, 1.0)), tokens_(burst_), last_(now) {}

void TokenBucket::refill(LimitClock::time_point now) {
  if (now <= last_) return;  // a clock that does not move (or fake time going back)
  const double seconds = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + seconds * rate_);
  last_ = now;
}

bool TokenBucket::available(LimitClock::time_point now) {
  if (unlimited()) return true;
  refill(now);
  return tokens_ >= kWhole;
}

bool TokenBucket::take(LimitClock::time_point now) {
  if (!available(now)) return false;
  if (!unlimited()) tokens_ = std::max(0.0, tokens_ - 1.0);
  return true;
}

LimitClock::time_point TokenBucket::next_token(LimitClock::time_point now) {
  if (available(now)) return now;
  const double wait = (1.0 - tokens_) / rate_;
  const auto from = std::max(now, last_);  // tokens_ is as of last_
  return from +
         std::chrono::duration_cast<LimitClock::duration>(std::chrono::duration<double>(wait)) +
         LimitClock::duration(1);  // rounding down must not leave us a hair short
}

std::chrono::milliseconds Backoff::next() {
  const auto delay = next_;
  next_ = std::min(max_, next_ * 2);
  return delay;
}

bool LogLimiter::admit(LimitClock::time_point now, uint64_t* suppressed, uint64_t count) {
  if (last_line_ && now - *last_line_ < interval_) {
    suppressed_ += count;
    return false;
  }
  *suppressed = suppressed_;
  suppressed_ = 0;
  last_line_ = now;
  return true;
}

uint64_t LogLimiter::flush(LimitClock::time_point now) {
  if (suppressed_ == 0 || (last_line_ && now - *last_line_ < interval_)) return 0;
  const uint64_t n = suppressed_;
  suppressed_ = 0;
  last_line_ = now;
  return n;
}

}  // namespace fracgpu::broker
