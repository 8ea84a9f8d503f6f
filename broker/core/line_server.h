// A Unix-socket server speaking newline-delimited JSON (protocol.h), used for both the
// admin socket and every tenant socket. It owns the framing rules: lines of at most
// 64 KiB, partial reads buffered, one reply per request in order. A line that is not a
// JSON object, or an over-long one, gets one error reply and the peer is disconnected;
// a well-formed request that the handler rejects just gets its error reply. Nothing a
// peer sends can throw out of here.
//
// Every socket also has limits (connection_limits.h): caps per uid and per server with
// room kept for root on the control plane, an admission rate, idle connections closed by
// a sweep once a second, and EMFILE answered by pausing the listener with a backoff
// instead of spinning on accept (line_server_accept.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/result.h"
#include "common/unix_socket.h"
#include "core/connection_limits.h"
#include "core/event_loop.h"

namespace fracgpu::broker {

struct Peer {
  uint64_t id = 0;
  int fd = -1;
  PeerCredentials cred;
  std::optional<uint32_t> slot;  // tenant sockets: the ProcessSlot registered on this connection
  // A descriptor a handler passes to the peer with its reply (SCM_RIGHTS, sent with the
  // reply's first byte); LineServer owns it from then on and closes it once sent or when
  // the peer goes away.
  int pending_fd = -1;
  int pending_second_fd = -1;          // sent after pending_fd in the same message (a host quota)
  std::string in;                      // bytes received, not yet a full line
  std::string out;                     // reply bytes not yet accepted by the kernel
  bool closing = false;                // disconnect once `out` is flushed
  bool privileged = false;             // root or the broker's euid on a control-plane socket
  LimitClock::time_point active_at{};  // accepted, or last request answered (idle sweep)
  EventLoop::Id loop_id = 0;
};

class LineServer {
 public:
  using RequestHandler = std::function<nlohmann::json(Peer&, const nlohmann::json&)>;
  // Decides at accept time, from the kernel's credentials alone, whether a peer may talk
  // to this server: nullopt admits it, a sentence refuses it (the peer gets that sentence
  // as an error reply and is disconnected before anything it sends is read).
  using PeerFilter = std::function<std::optional<std::string>(const PeerCredentials&)>;

  LineServer(EventLoop& loop, std::string label, RequestHandler on_request,
             ConnectionLimits limits = ConnectionLimits::tenant_socket());
  ~LineServer();
  LineServer(const LineServer&) = delete;
  LineServer& operator=(const LineServer&) = delete;

  // `owner`: the socket file's uid (listen_unix); unset: the broker's.
  Status listen(const std::filesystem::path& path, mode_t mode,
                std::optional<uid_t> owner = std::nullopt);
  void set_peer_filter(PeerFilter filter) { peer_filter_ = std::move(filter); }
  // Closes the listener and every connection; `unlink` also removes the socket file.
  void shutdown(bool unlink);

  static nlohmann::json error_reply(const std::string& sentence);

  std::size_t connections() const { return peers_.size(); }

 private:
  // Accepting and the limits (line_server_accept.cpp).
  void accept_all();
  void admit_or_refuse(int fd, bool via_spare);
  void refuse(int fd, const PeerCredentials* cred, const std::string& why);
  bool accept_with_spare();
  void pause_accepting(LimitClock::time_point until);
  void resume_accepting();
  void on_accept_error(int error);
  void on_timer();
  void sweep(LimitClock::time_point now);
  void schedule(LimitClock::time_point when);
  bool start_timer();
  // Connection I/O (line_server.cpp).
  void handle_events(uint64_t peer_id, uint32_t events);
  void read_from(Peer& peer);
  void process_lines(Peer& peer);
  void handle_line(Peer& peer, const std::string& line);
  void send(Peer& peer, const nlohmann::json& reply);
  void flush(Peer& peer);
  ssize_t send_some(Peer& peer);
  void disconnect(uint64_t peer_id);

  EventLoop& loop_;
  std::string label_;
  RequestHandler on_request_;
  ConnectionLimits limits_;
  uid_t broker_euid_;
  PeerFilter peer_filter_;
  std::filesystem::path path_;
  int listen_fd_ = -1;
  EventLoop::Id listen_id_ = 0;  // 0 while paused (or not listening)
  uint64_t next_peer_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
  UidCounts per_uid_;

  TokenBucket admit_bucket_, refuse_bucket_;
  Backoff accept_backoff_;
  LogLimiter refusal_log_, accept_error_log_, idle_log_;
  uint64_t accept_errors_ = 0;  // EMFILE and the like since the last logged line
  bool paused_ = false;
  LimitClock::time_point resume_at_{};
  // One timerfd per server, armed one-shot for the earliest of: the next idle sweep (once
  // a second while there are connections) and the end of a pause.
  int timer_fd_ = -1;
  EventLoop::Id timer_id_ = 0;
  std::optional<LimitClock::time_point> timer_at_;
  LimitClock::time_point next_sweep_{};
};

}  // namespace fracgpu::broker
