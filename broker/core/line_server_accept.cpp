// Accepting connections under the socket's limits (connection_limits.h), and the one
// timer per server that sweeps idle connections and ends pauses.
//
// Nothing here may spin: every way out of the accept loop that leaves connections in the
// backlog stops watching the listener until a deadline (a token is due, or a backoff
// after EMFILE/ENFILE grows from 100 ms to 1 s), and every refusal is logged through a
// LogLimiter (one line per second per server, EMFILE one per 10 s, with counts of what
// was not logged). Cost per accepted connection: accept4, SO_PEERCRED, getrlimit and the
// epoll registration; a refusal is accept4, SO_PEERCRED, one send and a close. The sweep
// is O(connections) once a second, only while the server has connections that can
// expire (not yet registered).
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/line_server.h"
#include "core/spare_descriptor.h"

namespace fracgpu::broker {
namespace {

constexpr int kAcceptBatch = 64;  // per wakeup; level-triggered epoll brings us back
constexpr auto kSweepPeriod = std::chrono::seconds(1);
constexpr auto kMinPause = std::chrono::milliseconds(10);  // batches admissions while paused

uint64_t descriptor_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<uint64_t>(lim.rlim_cur);
}

// One line to a peer that is about to be closed: non-blocking, best effort (a fresh
// socket's buffer always takes a sentence).
void tell(int fd, const nlohmann::json& reply) {
  const std::string line = reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  (void)!::send(fd, (line + "\n").data(), line.size() + 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

std::string not_logged(uint64_t n) {
  return n == 0 ? "" : " (" + std::to_string(n) + " more since the last line, not logged)";
}

}  // namespace

bool LineServer::start_timer() {
  if (timer_fd_ >= 0) return true;
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) return false;
  timer_id_ = loop_.add(timer_fd_, EPOLLIN, [this](uint32_t) { on_timer(); });
  if (timer_id_ == 0) {
    ::close(timer_fd_);
    timer_fd_ = -1;
    return false;
  }
  return true;
}

void LineServer::schedule(LimitClock::time_point when) {
  if (timer_fd_ < 0 || (timer_at_ && *timer_at_ <= when)) return;
  const auto delay =
      std::max<LimitClock::duration>(when - LimitClock::now(), std::chrono::microseconds(100));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count();
  itimerspec spec{};  // one-shot: on_timer decides what comes next
  spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  if (::timerfd_settime(timer_fd_, 0, &spec, nullptr) == 0) timer_at_ = when;
}

void LineServer::on_timer() {
  uint64_t expirations = 0;
  (void)!::read(timer_fd_, &expirations, sizeof expirations);
  timer_at_.reset();
  const auto now = LimitClock::now();
  if (paused_ && now >= resume_at_) resume_accepting();
  if (now >= next_sweep_) {
    sweep(now);
    next_sweep_ = now + kSweepPeriod;
  }
  if (paused_) schedule(resume_at_);
  // Only what can expire keeps the timer going: a connection of a registered process is
  // never closed as idle, so a tenant server whose peers all registered sleeps (1,000
  // tenant servers would otherwise wake 1,000 times a second for nothing).
  const bool expirable = std::any_of(peers_.begin(), peers_.end(),
                                     [](const auto& entry) { return !entry.second->slot; });
  const bool more = expirable || refusal_log_.pending() || accept_error_log_.pending() ||
                    idle_log_.pending() || spare_descriptor::held() < spare_descriptor::kCount;
  if (more) schedule(next_sweep_);
}

void LineServer::sweep(LimitClock::time_point now) {
  std::vector<uint64_t> idle;
  for (const auto& [id, peer] : peers_) {
    if (idle_expired(limits_, peer->active_at, now, peer->slot.has_value())) idle.push_back(id);
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(limits_.idle_timeout);
  for (uint64_t id : idle) {
    auto it = peers_.find(id);
    if (it == peers_.end()) continue;
    tell(it->second->fd, error_reply("closing an idle connection (no request for " +
                                     std::to_string(seconds.count()) + " s)"));
    disconnect(id);
  }
  uint64_t earlier = 0;
  if (!idle.empty() && idle_log_.admit(now, &earlier, idle.size()))
    spdlog::info("{}: closed {} idle connection(s) (no request for {} s, no registered process)",
                 label_, idle.size() + earlier, seconds.count());
  if (uint64_t n = idle_log_.flush(now))
    spdlog::info("{}: closed {} more idle connection(s)", label_, n);
  if (uint64_t n = refusal_log_.flush(now))
    spdlog::warn("{}: refused {} more connection(s) (not logged one by one)", label_, n);
  if (uint64_t n = accept_error_log_.flush(now))
    spdlog::warn("{}: {} more failed accept(s) (not logged one by one)", label_, n);
  spare_descriptor::ensure();
}

void LineServer::pause_accepting(LimitClock::time_point until) {
  if (timer_fd_ < 0) return;  // nothing would resume it (listen() makes sure there is one)
  if (listen_id_ != 0) loop_.remove(listen_id_);
  listen_id_ = 0;
  paused_ = true;
  resume_at_ = until;
  schedule(until);
}

void LineServer::resume_accepting() {
  paused_ = false;
  if (listen_fd_ < 0 || listen_id_ != 0) return;
  // Level-triggered: connections waiting in the backlog wake us at once.
  listen_id_ = loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_all(); });
  if (listen_id_ == 0) on_accept_error(errno);
}

void LineServer::on_accept_error(int error) {
  const auto now = LimitClock::now();
  const auto delay = accept_backoff_.next();
  uint64_t earlier = 0;
  if (accept_error_log_.admit(now, &earlier))
    spdlog::warn("{}: cannot accept connections: {}; not accepting for {} ms{}", label_,
                 std::strerror(error), delay.count(), not_logged(earlier));
  pause_accepting(now + delay);
}

void LineServer::accept_all() {
  for (int n = 0; n < kAcceptBatch && listen_fd_ >= 0 && !paused_; ++n) {
    const auto now = LimitClock::now();
    if (!admit_bucket_.available(now) || !refuse_bucket_.available(now)) {
      const auto due = std::max(
          {admit_bucket_.next_token(now), refuse_bucket_.next_token(now), now + kMinPause});
      pause_accepting(due);
      return;
    }
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      accept_backoff_.reset();
      admit_or_refuse(fd, /*via_spare=*/false);
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
    if ((error == EMFILE || error == ENFILE) && limits_.use_spare_fd && accept_with_spare())
      continue;
    on_accept_error(error);
    return;
  }
}

// At the descriptor limit: a spare makes room for exactly one connection (the last spare
// stays for the request handler). True when the spare could be taken back afterwards
// (the peer was refused), so accepting may go on.
bool LineServer::accept_with_spare() {
  if (spare_descriptor::held() < spare_descriptor::kCount || !spare_descriptor::release())
    return false;
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) admit_or_refuse(fd, /*via_spare=*/true);
  return spare_descriptor::ensure() && fd >= 0;
}

void LineServer::admit_or_refuse(int fd, bool via_spare) {
  const auto now = LimitClock::now();
  const auto cred = peer_credentials(fd);
  if (!cred) {
    refuse_bucket_.take(now);
    refuse(fd, nullptr, "the broker cannot read the peer's credentials");
    return;
  }
  const bool privileged = is_privileged(limits_, cred->uid, broker_euid_);
  std::optional<std::string> why;
  if (peer_filter_) {
    try {
      why = peer_filter_(*cred);
    } catch (const std::exception& e) {
      why = std::string("internal broker error: ") + e.what();
    }
  }
  if (!why) {
    AcceptFacts facts;
    facts.uid = cred->uid;
    facts.privileged = privileged;
    facts.fd = fd;
    facts.fd_limit = descriptor_limit();
    facts.out_of_descriptors = via_spare;
    facts.open_total = peers_.size();
    facts.open_of_uid = per_uid_.of(cred->uid);
    why = admission_refusal(limits_, facts);
  }
  if (why) {
    if (!privileged) refuse_bucket_.take(now);
    refuse(fd, &*cred, *why);
    return;
  }
  if (!privileged) admit_bucket_.take(now);
  auto peer = std::make_unique<Peer>();
  peer->id = next_peer_id_++;
  peer->fd = fd;
  peer->cred = *cred;
  peer->privileged = privileged;
  peer->active_at = now;
  const uint64_t id = peer->id;
  peer->loop_id =
      loop_.add(fd, EPOLLIN | EPOLLRDHUP, [this, id](uint32_t ev) { handle_events(id, ev); });
  if (peer->loop_id == 0) {
    ::close(fd);
    return;
  }
  spdlog::trace("{}: connection from pid {} uid {}", label_, cred->pid, cred->uid);
  peers_.emplace(id, std::move(peer));
  per_uid_.add(cred->uid);
  if (next_sweep_ <= now) next_sweep_ = now + kSweepPeriod;
  schedule(next_sweep_);
}

void LineServer::refuse(int fd, const PeerCredentials* cred, const std::string& why) {
  tell(fd, error_reply(why));
  ::close(fd);
  uint64_t earlier = 0;
  const auto now = LimitClock::now();
  if (refusal_log_.admit(now, &earlier)) {
    spdlog::warn("{}: refused a connection from pid {} uid {}: {}{}", label_, cred ? cred->pid : -1,
                 cred ? static_cast<int64_t>(cred->uid) : -1, why, not_logged(earlier));
  }
  schedule(std::max(next_sweep_, now + kSweepPeriod));  // flush the count of what was not logged
}

}  // namespace fracgpu::broker
