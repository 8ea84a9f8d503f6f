// The broker's HTTP face (broker/core/http_front.h) in its parts:
//  - the request head: where it ends (incrementally, a byte at a time too) and what it asks;
//  - HttpConnectionBook with fake time: a deadline that bytes never extend, the per-peer
//    and total bounds, who is evicted;
//  - RenderWorker: concurrent asks share one render, an ask during a render gets the next;
//  - HttpFront in-process over real loopback sockets: routes, errors, trickling connections
//    cut at their deadline while a client still gets its answer, the per-peer bound.
// The 1,000-connection attack on a real broker is tests/broker/http_abuse_test.cpp.
#include "core/http_front.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/http_connection_book.h"
#include "core/http_request_head.h"
#include "core/render_worker.h"

// A namespace of its own: the sanitizer jobs compile test files as unity builds.
namespace fracgpu::broker::http_front_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// ---- the request head ----------------------------------------------------------------

TEST(HttpRequestHead, EndIsFoundWhetherTheHeadComesWholeOrAByteAtATime) {
  const std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(find_head_end(head, 0), head.size());
  std::string growing;
  std::size_t scanned = 0, end = std::string::npos;
  for (char c : head + "extra") {
    growing.push_back(c);
    end = find_head_end(growing, scanned);
    scanned = growing.size();
    if (end != std::string::npos) break;
  }
  EXPECT_EQ(end, head.size());
  EXPECT_EQ(find_head_end("GET / HTTP/1.0\n\n", 0), 16u);  // bare LF from a lenient client
  EXPECT_EQ(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n", 0), std::string::npos);
}

TEST(HttpRequestHead, RequestLineIsParsedAndBadOnesGetAStatus) {
  auto v = parse_request_head("GET /metrics?x=1 HTTP/1.1\r\nAccept: */*\r\n\r\n");
  ASSERT_TRUE(v.ok) << v.why;
  EXPECT_EQ(v.head.method, "GET");
  EXPECT_EQ(v.head.path, "/metrics");
  EXPECT_FALSE(v.head.http10);
  EXPECT_TRUE(parse_request_head("\r\nHEAD /healthz HTTP/1.0\r\n\r\n").head.http10);
  EXPECT_EQ(parse_request_head("GET /metrics\r\n\r\n").status, 400);
  EXPECT_EQ(parse_request_head("GET metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse_request_head("G(T / HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse_request_head("GET / HTTP/2.0\r\n\r\n").status, 505);
  EXPECT_EQ(parse_request_head("GET / HTTP/1.1 x\r\n\r\n").status, 400);
}

// ---- the book, with fake time --------------------------------------------------------

HttpLimits small_limits() {
  HttpLimits l;
  l.head_timeout = 1000ms;
  l.response_timeout = 5000ms;
  l.max_connections = 4;
  l.max_per_peer = 2;
  return l;
}

TEST(HttpConnectionBook, TheHeadDeadlineIsFixedAtAcceptAndMovesOnlyWhenTheHeadIsComplete) {
  HttpConnectionBook book(small_limits());
  const auto t0 = Clock::time_point{} + 100s;
  book.add(1, "10.0.0.1", t0);
  EXPECT_EQ(book.next_deadline(), t0 + 1000ms);
  // Nothing a client sends reaches the book before its head is complete: at t0 + 999 ms it
  // is still due at t0 + 1 s, and at t0 + 1 s it has expired.
  EXPECT_TRUE(book.expired(t0 + 999ms).empty());
  ASSERT_EQ(book.expired(t0 + 1000ms).size(), 1u);
  EXPECT_EQ(book.expired(t0 + 1000ms)[0].second, HttpConnectionBook::Phase::kHead);
  book.complete_head(1, t0 + 500ms);
  EXPECT_EQ(book.next_deadline(), t0 + 5500ms);
  EXPECT_TRUE(book.expired(t0 + 5499ms).empty());
  EXPECT_EQ(book.expired(t0 + 5500ms)[0].second, HttpConnectionBook::Phase::kResponse);
  book.complete_head(1, t0 + 900ms);  // a second call moves nothing
  EXPECT_EQ(book.next_deadline(), t0 + 5500ms);
  book.remove(1);
  EXPECT_FALSE(book.next_deadline());
  EXPECT_EQ(book.size(), 0u);
}

TEST(HttpConnectionBook, APeerOverItsBoundDisplacesItsOwnOldestIncompleteConnection) {
  HttpConnectionBook book(small_limits());
  const auto t0 = Clock::time_point{} + 100s;
  book.add(1, "10.0.0.1", t0);
  book.add(2, "10.0.0.1", t0 + 1ms);
  book.add(3, "10.0.0.2", t0 + 2ms);
  EXPECT_FALSE(book.admit("10.0.0.2").evict);
  auto a = book.admit("10.0.0.1");
  ASSERT_TRUE(a.admit);
  EXPECT_EQ(a.evict, 1u);
  // Once its oldest has sent its head, the next oldest still sending one goes.
  book.complete_head(1, t0 + 3ms);
  EXPECT_EQ(book.admit("10.0.0.1").evict, 2u);
  // With every one of them being answered, the oldest of all of them goes.
  book.complete_head(2, t0 + 4ms);
  EXPECT_EQ(book.admit("10.0.0.1").evict, 1u);
  EXPECT_EQ(book.of_peer("10.0.0.1"), 2u);
}

TEST(HttpConnectionBook, AtTheTotalBoundTheOldestIncompleteConnectionOfAnyPeerGoes) {
  HttpConnectionBook book(small_limits());
  const auto t0 = Clock::time_point{} + 100s;
  for (uint64_t id = 1; id <= 4; ++id) book.add(id, "10.0.0." + std::to_string(id), t0 + id * 1ms);
  book.complete_head(1, t0 + 10ms);
  auto a = book.admit("10.0.0.9");
  ASSERT_TRUE(a.admit);
  EXPECT_EQ(a.evict, 2u);  // 1 is being answered; 2 is the oldest without a complete head
  for (uint64_t id = 2; id <= 4; ++id) book.complete_head(id, t0 + 10ms);
  EXPECT_EQ(book.admit("10.0.0.9").evict, 1u);  // no newcomer is ever locked out
  book.remove(2);
  EXPECT_FALSE(book.admit("10.0.0.9").evict);
}

// ---- the render worker ---------------------------------------------------------------

TEST(RenderWorker, AsksBeforeARenderShareItAndAnAskDuringOneGetsTheNext) {
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> renders{0}, done{0};
  RenderWorker worker(
      [&] {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return release; });
        release = false;
        return HttpResponse{200, "text/plain", "render " + std::to_string(++renders)};
      },
      [&] { ++done; });
  const uint64_t first = worker.ask();
  // The render of `first` is now running or about to: wait until it has started (it
  // blocks on `release`), then ask three times while it runs.
  while (worker.ask() == first) std::this_thread::sleep_for(1ms);
  const uint64_t second = worker.ask();
  EXPECT_EQ(worker.ask(), second);
  EXPECT_EQ(second, first + 1);
  for (int i = 0; i < 2; ++i) {
    {
      std::lock_guard<std::mutex> lock(m);
      release = true;
    }
    cv.notify_all();
    while (done < i + 1) std::this_thread::sleep_for(1ms);
  }
  const auto latest = worker.latest();
  EXPECT_EQ(latest.generation, second);
  EXPECT_EQ(latest.response->body, "render 2");
  EXPECT_EQ(renders, 2);  // five asks, two renders
  worker.stop();
}

// ---- HttpFront over loopback ---------------------------------------------------------

int connect_from(const std::string& source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` and reads the whole answer (the front closes after it), within `limit`.
std::string exchange(int port, const std::string& request, std::chrono::milliseconds limit = 3s,
                     const std::string& source = "127.0.0.1") {
  const int fd = connect_from(source, port);
  if (fd < 0) return "";
  std::string reply;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[8192];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      reply.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

// True when the server closed `fd` (EOF or reset) within `limit`.
bool closed_within(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
  char buf[512];
  return ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0;
}

class HttpFrontTest : public ::testing::Test {
 protected:
  void start(HttpLimits limits) {
    front_ = std::make_unique<HttpFront>("test-http", limits);
    front_->route_inline("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
    front_->route_rendered("/metrics", [this] {
      ++renders_;
      std::this_thread::sleep_for(render_delay_);
      return HttpResponse{200, "text/plain", std::string(200'000, 'm')};
    });
    ASSERT_TRUE(front_->start({"127.0.0.1", 0}).ok());
    port_ = front_->port();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (front_) front_->stop();
  }
  std::unique_ptr<HttpFront> front_;
  int port_ = 0;
  std::atomic<int> renders_{0};
  std::chrono::milliseconds render_delay_{0};
};

TEST_F(HttpFrontTest, RoutesAnswerAndBadRequestsGetTheirStatus) {
  start({});
  const std::string ok = exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << ok;
  EXPECT_NE(ok.find("Connection: close\r\n"), std::string::npos);
  EXPECT_NE(ok.find("\r\n\r\nok\n"), std::string::npos);
  const std::string metrics = exchange(port_, "GET /metrics HTTP/1.0\r\n\r\n");
  EXPECT_NE(metrics.find("Content-Length: 200000\r\n"), std::string::npos);
  EXPECT_EQ(metrics.size() - metrics.find("\r\n\r\n") - 4, 200'000u);
  const std::string head = exchange(port_, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_NE(head.find("Content-Length: 200000\r\n"), std::string::npos);
  EXPECT_EQ(head.size(), head.find("\r\n\r\n") + 4);  // no body
  EXPECT_EQ(exchange(port_, "GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  const std::string post = exchange(port_, "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_EQ(exchange(port_, "GET / HTTP/3.0\r\n\r\n").rfind("HTTP/1.1 505", 0), 0u);
  const std::string huge = "GET / HTTP/1.1\r\nX: " + std::string(9000, 'a');
  EXPECT_EQ(exchange(port_, huge).rfind("HTTP/1.1 431", 0), 0u);
}

// Thirty connections (ten addresses) send a header byte every 100 ms and never finish: each
// is cut at its head deadline (bytes do not extend it) while /healthz and /metrics answer.
TEST_F(HttpFrontTest, TricklingConnectionsAreCutAtTheirDeadlineWhileOthersAreAnswered) {
  HttpLimits limits;
  limits.head_timeout = 800ms;
  start(limits);
  std::vector<int> slow;
  for (int i = 0; i < 30; ++i) {
    const int fd = connect_from("127.0.2." + std::to_string(1 + i % 10), port_);
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  const auto opened = Clock::now();
  (void)!::send(slow[0], "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);
  std::vector<bool> closed(slow.size(), false);
  std::size_t n_closed = 0;
  Clock::duration last_close{};
  while (n_closed < slow.size() && Clock::now() - opened < 3s) {
    for (std::size_t i = 0; i < slow.size(); ++i) {
      if (closed[i]) continue;
      if (closed_within(slow[i], 0ms)) {
        closed[i] = true;
        ++n_closed;
        last_close = Clock::now() - opened;
        EXPECT_GE(Clock::now() - opened, 700ms) << "cut before its deadline";
        continue;
      }
      (void)!::send(slow[i], "X", 1, MSG_NOSIGNAL);
    }
    const auto before = Clock::now();
    EXPECT_NE(exchange(port_, "GET /healthz HTTP/1.1\r\n\r\n", 1s).find("ok\n"), std::string::npos);
    EXPECT_LT(Clock::now() - before, 1s);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(n_closed, slow.size()) << "trickling connections outlived their deadline";
  EXPECT_LT(last_close, 2s);
  const std::string metrics = exchange(port_, "GET /metrics HTTP/1.1\r\n\r\n", 1s);
  EXPECT_NE(metrics.find("Content-Length: 200000"), std::string::npos);
  for (int fd : slow) ::close(fd);
}

TEST_F(HttpFrontTest, AtTheTotalBoundTheOldestSilentConnectionMakesRoomForAScrape) {
  HttpLimits limits;
  limits.head_timeout = 5000ms;
  limits.max_connections = 8;
  start(limits);
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) {
    fds.push_back(connect_from("127.0.6." + std::to_string(1 + i), port_));
    ASSERT_GE(fds.back(), 0);
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE(closed_within(fds[0], 100ms));
  EXPECT_NE(exchange(port_, "GET /healthz HTTP/1.1\r\n\r\n", 1s).find("ok\n"), std::string::npos);
  EXPECT_TRUE(closed_within(fds[0], 1000ms));  // the oldest made room
  for (int i = 1; i < 8; ++i) EXPECT_FALSE(closed_within(fds[i], 0ms)) << i;
  for (int fd : fds) ::close(fd);
}

TEST_F(HttpFrontTest, APeerHoldsAtMostItsBoundAndOthersAreNotDisplaced) {
  HttpLimits limits;
  limits.head_timeout = 5000ms;
  limits.max_per_peer = 3;
  start(limits);
  const int other = connect_from("127.0.3.2", port_);
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) {
    fds.push_back(connect_from("127.0.3.1", port_));
    ASSERT_GE(fds.back(), 0);
    std::this_thread::sleep_for(20ms);  // accept order = age order
  }
  // The three oldest were displaced by the three newest; the other peer's stays.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(closed_within(fds[i], 1000ms)) << i;
  for (int i = 3; i < 6; ++i) EXPECT_FALSE(closed_within(fds[i], 100ms)) << i;
  EXPECT_FALSE(closed_within(other, 0ms));
  // The peer at its bound still gets an answer (its newest displaces its oldest).
  EXPECT_NE(exchange(port_, "GET /healthz HTTP/1.1\r\n\r\n", 1s, "127.0.3.1").find("ok\n"),
            std::string::npos);
  for (int fd : fds) ::close(fd);
  ::close(other);
}

// Sixteen scrapes at once while a render takes 300 ms: at most three renders (the one
// running when they come, the next, and one for a straggler), not sixteen.
TEST_F(HttpFrontTest, ConcurrentScrapesShareRenders) {
  render_delay_ = 300ms;
  start({});
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int i = 0; i < 16; ++i) {
    clients.emplace_back([&] {
      if (exchange(port_, "GET /metrics HTTP/1.1\r\n\r\n").find("Content-Length: 200000") !=
          std::string::npos)
        ++answered;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(answered, 16);
  EXPECT_LE(renders_, 3);
  EXPECT_GE(renders_, 1);
}

}  // namespace
}  // namespace fracgpu::broker::http_front_test
