// Sockets, epoll and timers of HttpFront (http_front.h). The decisions (deadlines, bounds,
// evictions) are HttpConnectionBook's; this file only carries them out.
#include "core/http_front.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/http_request_head.h"

namespace fracgpu::broker {
namespace {

constexpr int kAcceptBatch = 64;  // per wakeup; level-triggered epoll brings us back
// The descriptors below RLIMIT_NOFILE the HTTP face leaves to the tenant and admin sockets.
constexpr uint64_t kFdHeadroom = 256;

std::string peer_address(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {  // one peer, one key, whichever socket family
      ::inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], text, sizeof text);
    } else {
      ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    }
  }
  return text;
}

bool short_of_descriptors(int fd) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return false;
  const uint64_t limit = lim.rlim_cur;
  // accept() returns the lowest free descriptor, so every one below fd is in use.
  return static_cast<uint64_t>(fd) + std::min<uint64_t>(kFdHeadroom, limit / 4) >= limit;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

std::shared_ptr<const HttpResponse> plain(int status, std::string body) {
  auto r = std::make_shared<HttpResponse>();
  r->status = status;
  r->body = std::move(body) + "\n";
  return r;
}

std::string not_logged(uint64_t n) {
  return n == 0 ? "" : " (" + std::to_string(n) + " more since the last line, not logged)";
}

long long ms(std::chrono::milliseconds d) {
  return static_cast<long long>(d.count());
}

}  // namespace

HttpFront::HttpFront(std::string label, HttpLimits limits)
    : label_(std::move(label)), book_(limits) {}

HttpFront::~HttpFront() {
  stop();
}

void HttpFront::route_inline(std::string path, Handler handler) {
  inline_routes_[std::move(path)] = std::move(handler);
}

void HttpFront::route_rendered(std::string path, Handler handler) {
  rendered_path_ = std::move(path);
  rendered_ = std::move(handler);
}

Status HttpFront::start(const ListenAddress& address) {
  const std::string where = address.host + ":" + std::to_string(address.port);
  if (!loop_.valid()) return Status::failure(label_ + ": cannot create an epoll instance");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  if (const int rc = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return Status::failure("cannot listen for metrics on " + where + ": " + ::gai_strerror(rc));
  int error = 0;
  for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      break;
    }
    error = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0)
    return Status::failure("cannot listen for metrics on " + where + ": " + std::strerror(error));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  timer_fd_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (wake_fd_ < 0 || timer_fd_ < 0) return Status::failure(label_ + ": cannot create its timers");
  listen_id_ = loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_all(); });
  const bool added =
      listen_id_ != 0 && loop_.add(wake_fd_, EPOLLIN, [this](uint32_t) { on_wake(); }) != 0 &&
      loop_.add(timer_fd_, EPOLLIN, [this](uint32_t) { on_timer(); }) != 0 &&
      loop_.add_timer(std::chrono::seconds(1), [this] { flush_logs(LimitClock::now()); }) != 0;
  if (!added) return Status::failure(label_ + ": cannot watch its sockets");
  if (rendered_) {
    worker_ = std::make_unique<RenderWorker>(rendered_, [this] {
      const uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof one);
    });
  }
  thread_ = std::thread([this] { loop_.run(); });
  return {};
}

void HttpFront::stop() {
  if (thread_.joinable()) {
    stopping_ = true;
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (worker_) worker_->stop();
  worker_.reset();
  for (auto& [id, conn] : conns_) ::close(conn.fd);
  conns_.clear();
  for (int* fd : {&listen_fd_, &wake_fd_, &timer_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

// ---- accepting ---------------------------------------------------------------------

void HttpFront::accept_all() {
  for (int n = 0; n < kAcceptBatch && listen_id_ != 0; ++n) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd =
        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      accept_backoff_.reset();
      admit(fd, peer_address(ss));
      continue;
    }
    const int error = errno;
    if (error == EAGAIN || error == EWOULDBLOCK) return;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) continue;
    pause_accepting(accept_backoff_.next(), error);  // EMFILE, ENFILE, ENOBUFS...
    return;
  }
}

void HttpFront::pause_accepting(std::chrono::milliseconds delay, int error) {
  const auto now = LimitClock::now();
  uint64_t earlier = 0;
  if (refuse_log_.admit(now, &earlier))
    spdlog::warn("{}: cannot accept connections: {}; not accepting for {} ms{}", label_,
                 std::strerror(error), ms(delay), not_logged(earlier));
  loop_.remove(listen_id_);
  listen_id_ = 0;
  resume_at_ = now + delay;
  schedule(*resume_at_);
}

void HttpFront::admit(int fd, const std::string& peer) {
  const auto now = LimitClock::now();
  uint64_t earlier = 0;
  if (short_of_descriptors(fd)) {
    if (refuse_log_.admit(now, &earlier))
      spdlog::warn("{}: refused a connection from {}: the broker is short of file descriptors{}",
                   label_, peer, not_logged(earlier));
    ::close(fd);
    return;
  }
  const auto admission = book_.admit(peer);
  if (!admission.admit) {
    ::close(fd);
    return;
  }
  if (admission.evict) {
    const std::string* evicted_peer = book_.peer_of(*admission.evict);
    if (evict_log_.admit(now, &earlier))
      spdlog::warn("{}: closed a connection from {}: {}{}", label_,
                   evicted_peer ? *evicted_peer : std::string("?"), admission.why,
                   not_logged(earlier));
    close_conn(*admission.evict);
  }
  const uint64_t id = next_id_++;
  Conn conn;
  conn.fd = fd;
  conn.peer = peer;
  conn.loop_id = loop_.add(fd, EPOLLIN, [this, id](uint32_t ev) { on_event(id, ev); });
  if (conn.loop_id == 0) {
    ::close(fd);
    return;
  }
  conns_.emplace(id, std::move(conn));
  book_.add(id, peer, now);
  schedule(*book_.next_deadline());
}

// ---- reading the head ----------------------------------------------------------------

void HttpFront::on_event(uint64_t id, uint32_t events) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.response) return on_writable(id);
  if (book_.phase(id) == HttpConnectionBook::Phase::kHead) return read_head(id, it->second);
  // Waiting for its render, nothing watched but hang-ups and errors: the client went away.
  if (events & (EPOLLHUP | EPOLLERR)) close_conn(id);
}

void HttpFront::read_head(uint64_t id, Conn& conn) {
  const std::size_t cap = book_.limits().max_head_bytes;
  char buf[4096];
  for (;;) {
    const std::size_t room = cap + 1 - std::min(cap + 1, conn.in.size());
    const ssize_t n = ::recv(conn.fd, buf, std::min(sizeof buf, room), 0);
    if (n > 0) {
      conn.in.append(buf, static_cast<std::size_t>(n));
      const std::size_t end = find_head_end(conn.in, conn.scanned);
      conn.scanned = conn.in.size();
      if (end != std::string::npos) return on_head(id, conn, end);
      if (conn.in.size() > cap)
        return respond(id,
                       plain(431, "the request head is over " + std::to_string(cap) + " bytes"));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno == EINTR) continue;
    close_conn(id);  // EOF or an error before a complete head: nothing to answer
    return;
  }
}

void HttpFront::on_head(uint64_t id, Conn& conn, std::size_t head_end) {
  book_.complete_head(id, LimitClock::now());
  const HeadVerdict verdict = parse_request_head(std::string_view(conn.in).substr(0, head_end));
  conn.in.clear();
  conn.in.shrink_to_fit();
  if (!verdict.ok) return respond(id, plain(verdict.status, verdict.why));
  const RequestHead& head = verdict.head;
  if (head.method != "GET" && head.method != "HEAD")
    return respond(id, plain(405, "only GET and HEAD are served"));
  conn.head_only = head.method == "HEAD";
  if (auto route = inline_routes_.find(head.path); route != inline_routes_.end()) {
    try {
      return respond(id, std::make_shared<HttpResponse>(route->second()));
    } catch (const std::exception& e) {
      return respond(id, plain(500, std::string("internal error: ") + e.what()));
    }
  }
  if (worker_ && head.path == rendered_path_) {
    // Nothing to read any more; errors and hang-ups are still reported.
    loop_.modify(conn.loop_id, 0);
    conn.waits_for = worker_->ask();
    schedule(*book_.next_deadline());
    return;
  }
  respond(id, plain(404, "not found (this endpoint serves /metrics and /healthz)"));
}

// ---- answering -----------------------------------------------------------------------

void HttpFront::on_wake() {
  uint64_t count = 0;
  (void)!::read(wake_fd_, &count, sizeof count);
  if (stopping_) {
    loop_.stop();
    return;
  }
  if (!worker_) return;
  const RenderWorker::Rendered done = worker_->latest();
  std::vector<uint64_t> ready;
  for (const auto& [id, conn] : conns_)
    if (conn.waits_for != 0 && conn.waits_for <= done.generation) ready.push_back(id);
  for (uint64_t id : ready) respond(id, done.response);
}

void HttpFront::respond(uint64_t id, std::shared_ptr<const HttpResponse> response) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& conn = it->second;
  book_.complete_head(id, LimitClock::now());  // no-op when already complete
  conn.waits_for = 0;
  conn.out_head = "HTTP/1.1 " + std::to_string(response->status) + " " +
                  reason_phrase(response->status) + "\r\nContent-Type: " + response->content_type +
                  "\r\nContent-Length: " + std::to_string(response->body.size()) +
                  "\r\nConnection: close\r\n" +
                  (response->status == 405 ? "Allow: GET, HEAD\r\n" : "") + "\r\n";
  conn.response = std::move(response);
  conn.sent = 0;
  loop_.modify(conn.loop_id, EPOLLOUT);
  on_writable(id);
}

void HttpFront::on_writable(uint64_t id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& conn = it->second;
  const std::string& body = conn.response->body;
  const std::size_t total = conn.out_head.size() + (conn.head_only ? 0 : body.size());
  while (conn.sent < total) {
    iovec iov[2];
    int count = 0;
    if (conn.sent < conn.out_head.size()) {
      iov[count++] = {conn.out_head.data() + conn.sent, conn.out_head.size() - conn.sent};
      if (!conn.head_only && !body.empty())
        iov[count++] = {const_cast<char*>(body.data()), body.size()};
    } else {
      const std::size_t from = conn.sent - conn.out_head.size();
      iov[count++] = {const_cast<char*>(body.data()) + from, body.size() - from};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<decltype(msg.msg_iovlen)>(count);
    const ssize_t n = ::sendmsg(conn.fd, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      conn.sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // EPOLLOUT brings us back
    if (n < 0 && errno == EINTR) continue;
    break;  // the client went away
  }
  if (conn.sent >= total) {
    ::shutdown(conn.fd, SHUT_WR);
    // Read what the client sent after its head, so closing does not reset the connection
    // under the answer still in flight (a GET has nothing more; this is cheap).
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(conn.fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
  }
  close_conn(id);
}

// ---- deadlines -----------------------------------------------------------------------

void HttpFront::schedule(LimitClock::time_point when) {
  if (timer_at_ && *timer_at_ <= when) return;
  const auto delay =
      std::max<LimitClock::duration>(when - LimitClock::now(), std::chrono::microseconds(100));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count();
  itimerspec spec{};  // one-shot: on_timer decides what comes next
  spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  if (::timerfd_settime(timer_fd_, 0, &spec, nullptr) == 0) timer_at_ = when;
}

void HttpFront::on_timer() {
  uint64_t expirations = 0;
  (void)!::read(timer_fd_, &expirations, sizeof expirations);
  timer_at_.reset();
  const auto now = LimitClock::now();
  if (resume_at_ && now >= *resume_at_) {
    resume_at_.reset();
    listen_id_ = loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_all(); });
    if (listen_id_ == 0) pause_accepting(accept_backoff_.next(), errno);
  }
  expire(now);
  if (resume_at_) schedule(*resume_at_);
  if (auto next = book_.next_deadline()) schedule(*next);
}

void HttpFront::expire(LimitClock::time_point now) {
  const HttpLimits& limits = book_.limits();
  for (const auto& [id, phase] : book_.expired(now)) {
    auto it = conns_.find(id);
    if (it == conns_.end()) {
      book_.remove(id);
      continue;
    }
    uint64_t earlier = 0;
    if (cut_log_.admit(now, &earlier)) {
      if (phase == HttpConnectionBook::Phase::kHead) {
        spdlog::warn(
            "{}: cut a connection from {}: no complete request head within {} ms ({} bytes "
            "received){}",
            label_, it->second.peer, ms(limits.head_timeout), it->second.in.size(),
            not_logged(earlier));
      } else {
        spdlog::warn("{}: cut a connection from {}: its answer was not taken within {} ms{}",
                     label_, it->second.peer, ms(limits.response_timeout), not_logged(earlier));
      }
    }
    close_conn(id);
  }
}

void HttpFront::close_conn(uint64_t id) {
  book_.remove(id);
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  loop_.remove(it->second.loop_id);
  ::close(it->second.fd);
  conns_.erase(it);
}

void HttpFront::flush_logs(LimitClock::time_point now) {
  if (uint64_t n = cut_log_.flush(now))
    spdlog::warn("{}: cut {} more connection(s) past their deadline (not logged one by one)",
                 label_, n);
  if (uint64_t n = evict_log_.flush(now))
    spdlog::warn(
        "{}: closed {} more connection(s) over the connection bounds (not logged one by "
        "one)",
        label_, n);
  if (uint64_t n = refuse_log_.flush(now))
    spdlog::warn("{}: refused {} more connection(s) (not logged one by one)", label_, n);
}

}  // namespace fracgpu::broker
