// A Unix-socket server speaking newline-delimited JSON (protocol.h), used for both the
// admin socket and every tenant socket. It owns the framing rules: lines of at most
// 64 KiB, partial reads buffered, one reply per request in order. A line that is not a
// JSON object, or an over-long one, gets one error reply and the peer is disconnected;
// a well-formed request that the handler rejects just gets its error reply. Nothing a
// peer sends can throw out of here.
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
  std::string in;        // bytes received, not yet a full line
  std::string out;       // reply bytes not yet accepted by the kernel
  bool closing = false;  // disconnect once `out` is flushed
  EventLoop::Id loop_id = 0;
};

class LineServer {
 public:
  using RequestHandler = std::function<nlohmann::json(Peer&, const nlohmann::json&)>;
  // Decides at accept time, from the kernel's credentials alone, whether a peer may talk
  // to this server: nullopt admits it, a sentence refuses it (the peer gets that sentence
  // as an error reply and is disconnected before anything it sends is read).
  using PeerFilter = std::function<std::optional<std::string>(const PeerCredentials&)>;

  LineServer(EventLoop& loop, std::string label, RequestHandler on_request);
  ~LineServer();
  LineServer(const LineServer&) = delete;
  LineServer& operator=(const LineServer&) = delete;

  Status listen(const std::filesystem::path& path, mode_t mode);
  void set_peer_filter(PeerFilter filter) { peer_filter_ = std::move(filter); }
  // Closes the listener and every connection; `unlink` also removes the socket file.
  void shutdown(bool unlink);

  static nlohmann::json error_reply(const std::string& sentence);

 private:
  void accept_all();
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
  PeerFilter peer_filter_;
  std::filesystem::path path_;
  int listen_fd_ = -1;
  EventLoop::Id listen_id_ = 0;
  uint64_t next_peer_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
};

}  // namespace fracgpu::broker
