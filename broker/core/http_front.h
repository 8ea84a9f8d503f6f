// The broker's HTTP face (GET /metrics, GET /healthz; metrics_server.h) served from one
// epoll thread of its own, built so that a slow or hostile client cannot stall it:
//  - no thread ever waits on a client: every socket is non-blocking and watched by one
//    EventLoop on the front's thread, so 1,000 trickling connections cost memory and
//    wakeups, never a worker;
//  - each connection has a deadline fixed at accept for its whole request head and at
//    the head's end for its whole answer (http_connection_book.h); bytes received never
//    extend it, and a connection past it is closed;
//  - connections are bounded per peer address and in total; a newcomer over a bound takes
//    the place of the oldest connection that has not sent a complete head;
//  - an inline route (/healthz) is answered on the front's thread; the rendered route
//    (/metrics) by RenderWorker, which no client can hold and which answers every waiting
//    scrape with one render;
//  - every cut, eviction and refusal is logged through a LogLimiter (one line per kind per
//    10 s, with the count of what was not logged).
// Every answer closes its connection (Connection: close): no keep-alive to bound.
//
// Why not a library's own server: cpp-httplib 0.11 (Debian 12) gives each accepted
// connection a thread of a fixed pool (max(8, cores - 1)) and its read timeout is per
// read, so a few connections sending a header byte now and then hold every worker
// (tests/broker/http_abuse_test.cpp fails against the old server); civetweb 1.15's
// request_timeout_ms bounds the whole head, but it also gives each connection a worker
// thread while reading, so it holds only with more threads than the attacker has
// connections (measured: docs/security.md, "The HTTP face").
//
// Cost: per connection one accept4, a few recv/send and epoll_ctl calls, and O(log n)
// in the book; per scrape one render, shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "common/result.h"
#include "core/connection_limits.h"
#include "core/event_loop.h"
#include "core/http_connection_book.h"
#include "core/render_worker.h"

namespace fracgpu::broker {

struct ListenAddress {
  std::string host;
  int port = 0;
};

class HttpFront {
 public:
  using Handler = std::function<HttpResponse()>;

  HttpFront(std::string label, HttpLimits limits);
  ~HttpFront();
  HttpFront(const HttpFront&) = delete;
  HttpFront& operator=(const HttpFront&) = delete;

  // Routes, before start(). An inline handler runs on the front's thread: it must be
  // cheap and must not block. The rendered one (at most one) runs on the RenderWorker.
  void route_inline(std::string path, Handler handler);
  void route_rendered(std::string path, Handler handler);

  // Binds and listens synchronously (a busy port is reported here), then serves.
  Status start(const ListenAddress& address);
  void stop();
  int port() const { return port_; }  // the bound port (useful with port 0)

 private:
  struct Conn {
    int fd = -1;
    std::string peer;  // the address without the port: the per-peer key
    EventLoop::Id loop_id = 0;
    std::string in;           // the request head so far
    std::size_t scanned = 0;  // find_head_end's progress
    bool head_only = false;   // HEAD: the status line and header fields, no body
    uint64_t waits_for = 0;   // the render generation it waits for (0: none)
    std::string out_head;     // status line and header fields
    std::shared_ptr<const HttpResponse> response;
    std::size_t sent = 0;
  };

  void accept_all();
  void admit(int fd, const std::string& peer);
  void on_event(uint64_t id, uint32_t events);
  void read_head(uint64_t id, Conn& conn);
  void on_head(uint64_t id, Conn& conn, std::size_t head_end);
  void respond(uint64_t id, std::shared_ptr<const HttpResponse> response);
  void on_writable(uint64_t id);
  void on_wake();
  void on_timer();
  void expire(LimitClock::time_point now);
  void close_conn(uint64_t id);
  void schedule(LimitClock::time_point when);
  void pause_accepting(std::chrono::milliseconds delay, int error);
  void flush_logs(LimitClock::time_point now);

  std::string label_;
  HttpConnectionBook book_;
  std::map<std::string, Handler> inline_routes_;
  std::string rendered_path_;
  Handler rendered_;

  EventLoop loop_;
  std::unique_ptr<RenderWorker> worker_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  int listen_fd_ = -1, wake_fd_ = -1, timer_fd_ = -1;
  int port_ = 0;
  EventLoop::Id listen_id_ = 0;  // 0 while paused
  std::optional<LimitClock::time_point> timer_at_, resume_at_;
  Backoff accept_backoff_{std::chrono::milliseconds(100), std::chrono::milliseconds(1000)};
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Conn> conns_;
  LogLimiter cut_log_{std::chrono::seconds(10)}, evict_log_{std::chrono::seconds(10)},
      refuse_log_{std::chrono::seconds(10)};
};

}  // namespace fracgpu::broker
