// Connection handling of LineServer: non-blocking accept/read/write driven by epoll.
// Replies that the kernel does not take at once are buffered and flushed on EPOLLOUT;
// a peer that lets more than kMaxPendingOutput pile up (it sends but never reads) is
// dropped, so one misbehaving client cannot grow the broker's memory without bound.
// Accepting, limits and the timer are in line_server_accept.cpp.
#include "core/line_server.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/spare_descriptor.h"
#include "fracgpu/descriptor_passing.h"
#include "fracgpu/protocol.h"

namespace fracgpu::broker {
namespace {

constexpr std::size_t kMaxPendingOutput = 4u << 20;

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

LineServer::LineServer(EventLoop& loop, std::string label, RequestHandler on_request,
                       ConnectionLimits limits)
    : loop_(loop),
      label_(std::move(label)),
      on_request_(std::move(on_request)),
      limits_(limits),
      broker_euid_(::geteuid()),
      admit_bucket_(limits.admit_rate, limits.admit_burst, LimitClock::now()),
      refuse_bucket_(limits.refuse_rate, limits.refuse_burst, LimitClock::now()),
      accept_backoff_(std::chrono::milliseconds(100), std::chrono::seconds(1)),
      refusal_log_(std::chrono::seconds(1)),
      accept_error_log_(std::chrono::seconds(10)),
      idle_log_(std::chrono::seconds(10)) {
  spare_descriptor::ensure();
}

LineServer::~LineServer() {
  shutdown(false);
}

nlohmann::json LineServer::error_reply(const std::string& sentence) {
  return {{"ok", false}, {"error", sentence}};
}

Status LineServer::listen(const std::filesystem::path& path, mode_t mode,
                          std::optional<uid_t> owner) {
  // The timer first: at EMFILE it could not be created, and without it a paused
  // listener would never resume.
  if (!start_timer()) return Status::failure("cannot create a timer for " + path.string());
  auto fd = listen_unix(path, mode, owner);
  if (!fd) return Status::failure(fd.error());
  listen_fd_ = *fd;
  path_ = path;
  listen_id_ = loop_.add(listen_fd_, EPOLLIN, [this](uint32_t) { accept_all(); });
  if (listen_id_ == 0) return Status::failure("cannot watch " + path.string());
  return {};
}

void LineServer::shutdown(bool unlink) {
  while (!peers_.empty()) disconnect(peers_.begin()->first);
  if (listen_id_ != 0) loop_.remove(listen_id_);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (unlink && !path_.empty()) ::unlink(path_.c_str());
  listen_id_ = 0;
  listen_fd_ = -1;
  paused_ = false;
  if (timer_id_ != 0) loop_.remove(timer_id_);
  if (timer_fd_ >= 0) ::close(timer_fd_);
  timer_id_ = 0;
  timer_fd_ = -1;
  timer_at_.reset();
}

void LineServer::handle_events(uint64_t peer_id, uint32_t events) {
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return;
  Peer& peer = *it->second;
  if (events & EPOLLOUT) flush(peer);
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) && peers_.count(peer_id))
    read_from(peer);
}

void LineServer::read_from(Peer& peer) {
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(peer.fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (!peer.closing) peer.in.append(buf, static_cast<std::size_t>(n));
      if (peer.in.size() > 2 * protocol::kMaxMessageBytes) break;  // process before reading more
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    const uint64_t id = peer.id;
    process_lines(peer);  // requests that arrived together with the hang-up still count
    if (peers_.count(id)) disconnect(id);
    return;
  }
  process_lines(peer);
}

void LineServer::process_lines(Peer& peer) {
  const uint64_t id = peer.id;
  std::size_t start = 0;
  while (!peer.closing) {
    const std::size_t nl = peer.in.find('\n', start);
    const std::size_t line_len = (nl == std::string::npos ? peer.in.size() : nl) - start;
    if (line_len > protocol::kMaxMessageBytes) {
      spdlog::warn("{}: pid {} sent a line longer than {} bytes; disconnecting", label_,
                   peer.cred.pid, protocol::kMaxMessageBytes);
      send(peer, error_reply("message longer than " + std::to_string(protocol::kMaxMessageBytes) +
                             " bytes"));
      peer.closing = true;
      break;
    }
    if (nl == std::string::npos) break;
    const std::string line = peer.in.substr(start, nl - start);
    start = nl + 1;
    if (!blank(line)) handle_line(peer, line);
    if (!peers_.count(id)) return;  // the handler or a failed send dropped the peer
  }
  peer.in.erase(0, start);
  if (peer.closing) {
    peer.in.clear();
    if (peer.out.empty()) disconnect(id);
  }
}

void LineServer::handle_line(Peer& peer, const std::string& line) {
  nlohmann::json request = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) {
    spdlog::warn("{}: pid {} sent a line that is not a JSON object; disconnecting", label_,
                 peer.cred.pid);
    send(peer, error_reply("request is not a JSON object"));
    peer.closing = true;
    return;
  }
  nlohmann::json reply;
  try {
    reply = on_request_(peer, request);
  } catch (const std::exception& e) {  // a handler bug must not take the broker down
    spdlog::error("{}: internal error handling a request from pid {}: {}", label_, peer.cred.pid,
                  e.what());
    reply = error_reply(std::string("internal broker error: ") + e.what());
  }
  peer.active_at = LimitClock::now();
  send(peer, reply);
}

void LineServer::send(Peer& peer, const nlohmann::json& reply) {
  peer.out += reply.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  peer.out += '\n';
  flush(peer);
}

// One send(2) of the pending output; the first one after a handler attached a descriptor
// carries it (SCM_RIGHTS travels with the first byte it is sent with).
ssize_t LineServer::send_some(Peer& peer) {
  if (peer.pending_fd < 0)
    return ::send(peer.fd, peer.out.data(), peer.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  const int fds[2] = {peer.pending_fd, peer.pending_second_fd};
  const ssize_t n = descriptor_passing::send_with(peer.fd, peer.out.data(), peer.out.size(), fds,
                                                  peer.pending_second_fd >= 0 ? 2 : 1,
                                                  MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n > 0) {
    ::close(peer.pending_fd);
    peer.pending_fd = -1;
    if (peer.pending_second_fd >= 0) ::close(peer.pending_second_fd);
    peer.pending_second_fd = -1;
  }
  return n;
}

void LineServer::flush(Peer& peer) {
  while (!peer.out.empty()) {
    const ssize_t n = send_some(peer);
    if (n > 0) {
      peer.out.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    peer.out.clear();  // the peer is gone; the read side will notice the hang-up
    peer.closing = true;
    break;
  }
  if (peer.out.size() > kMaxPendingOutput) {
    spdlog::warn("{}: pid {} does not read its replies; disconnecting", label_, peer.cred.pid);
    peer.out.clear();
    peer.closing = true;
  }
  const uint32_t want =
      EPOLLIN | EPOLLRDHUP | (peer.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
  loop_.modify(peer.loop_id, want);
  if (peer.closing && peer.out.empty() && peer.in.empty()) disconnect(peer.id);
}

void LineServer::disconnect(uint64_t peer_id) {
  auto it = peers_.find(peer_id);
  if (it == peers_.end()) return;
  std::unique_ptr<Peer> peer = std::move(it->second);
  peers_.erase(it);
  per_uid_.remove(peer->cred.uid);
  loop_.remove(peer->loop_id);
  ::close(peer->fd);
  if (peer->pending_fd >= 0) ::close(peer->pending_fd);
  if (peer->pending_second_fd >= 0) ::close(peer->pending_second_fd);
  // A descriptor is free again: the spares come first, and a control-plane listener that
  // stopped for want of one resumes at once rather than after its backoff.
  if (spare_descriptor::ensure() && paused_ && limits_.use_spare_fd) resume_accepting();
}

}  // namespace fracgpu::broker
