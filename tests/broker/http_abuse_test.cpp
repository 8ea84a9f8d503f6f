// The broker's HTTP face under abuse (issue 27, row 4), against a real fracgpu-broker over
// the simulated GPU with --metrics-listen on 127.0.0.1 and its default bounds:
//  - 1,000 abusive connections from 125 loopback addresses (a third half-open, a third
//    sending one header byte a second, a third one header line a second, none ever
//    finishing, each reconnected as soon as the broker cuts it) are kept up for 8 s while a scrape
//    of /metrics and a probe of /healthz must each be answered, whole, within 1 s, four times a
//    second; the broker logs its cuts rate-limited;
//  - one address holds at most its bound of connections (the default, 16): the oldest
//    are closed, the newest stay, and that address still gets an answer;
//  - the new flags' bad values stop the start with an error naming the flag;
//  - `fracgpu-broker --probe` answers from the admin socket, and fails without a broker.
// The descriptor limit: the test raises its soft RLIMIT_NOFILE to min(hard, 8192); with a
// hard limit under 1,200 the attack is sized down to what fits, and the test says so.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "broker_harness.h"

namespace fracgpu::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// A non-blocking connection from `source` (any 127.0.0.0/8 address) to 127.0.0.1:port.
int connect_from(const std::string& source, int port, bool nonblocking) {
  const int fd =
      ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  sockaddr_in src{};
  src.sin_family = AF_INET;
  ::inet_pton(AF_INET, source.c_str(), &src.sin_addr);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      (::connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst) != 0 && errno != EINPROGRESS)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Answer {
  bool whole = false;  // a 200 whose body has its Content-Length
  std::string text;
  Clock::duration took{};
};

// One GET on a fresh connection; the whole answer must come within `limit`.
Answer get(int port, const std::string& path, std::chrono::milliseconds limit,
           const std::string& source = "127.0.0.1") {
  Answer a;
  const auto start = Clock::now();
  const int fd = connect_from(source, port, /*nonblocking=*/false);
  if (fd < 0) return a;
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(start + limit - Clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buf[65536];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      a.text.append(buf, static_cast<std::size_t>(n));
      const auto end = a.text.find("\r\n\r\n");
      const auto cl = a.text.find("Content-Length: ");
      if (end != std::string::npos && cl != std::string::npos && cl < end &&
          a.text.size() - end - 4 == std::stoul(a.text.substr(cl + 16))) {
        a.whole = a.text.rfind("HTTP/1.1 200", 0) == 0;
        break;
      }
    }
  }
  a.took = Clock::now() - start;
  ::close(fd);
  return a;
}

bool closed_within(int fd, std::chrono::milliseconds limit) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(limit.count())) <= 0) return false;
  char buf[512];
  return ::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0;
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The descriptors this process may have: the soft limit raised towards the hard one.
rlim_t raise_nofile(rlim_t want) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  const rlim_t target = lim.rlim_max == RLIM_INFINITY ? want : std::min(want, lim.rlim_max);
  if (lim.rlim_cur < target) {
    lim.rlim_cur = target;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur;
}

class HttpAbuseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FRACGPU_REQUIRE_FAKE_DRIVER();
    port_ = free_port();
    ASSERT_GT(port_, 0);
  }
  bool start_broker(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--metrics-listen", "127.0.0.1:" + std::to_string(port_)});
    return broker_.start(extra);
  }
  BrokerProcess broker_;
  int port_ = 0;
};

// The attack: `n` connections from 125 addresses, kinds in turn: half-open, a byte a
// second, a header line a second. A connection the broker closes is opened again in the
// next pass (50 ms): the broker never has fewer than `n` attackers for long.
class Attack {
 public:
  Attack(int port, std::size_t n) : port_(port), conns_(n) {}
  ~Attack() { stop(); }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (auto& c : conns_)
      if (c.fd >= 0) ::close(c.fd);
  }
  std::size_t open() const { return open_; }
  uint64_t reopened() const { return reopened_; }

 private:
  struct Conn {
    int fd = -1;
    Clock::time_point next{};  // next byte, or next reconnect when fd < 0
  };
  std::string source(std::size_t i) const { return "127.0.1." + std::to_string(1 + i % 125); }
  void run() {
    for (std::size_t i = 0; i < conns_.size(); ++i)
      conns_[i].fd = connect_from(source(i), port_, true);
    while (!stop_) {
      const auto now = Clock::now();
      std::size_t open = 0;
      for (std::size_t i = 0; i < conns_.size() && !stop_; ++i) {
        Conn& c = conns_[i];
        if (c.fd >= 0 && closed_within(c.fd, 0ms)) {  // cut: back at once
          ::close(c.fd);
          c.fd = -1;
          c.next = now;
        }
        if (c.fd < 0 && now >= c.next) {
          c.fd = connect_from(source(i), port_, true);
          ++reopened_;
          c.next = now;
        }
        if (c.fd < 0) continue;
        ++open;
        if (now < c.next) continue;
        c.next = now + 1s;
        if (i % 3 == 1) (void)!::send(c.fd, "G", 1, MSG_NOSIGNAL);
        if (i % 3 == 2) (void)!::send(c.fd, "X-Slow: 1\r\n", 11, MSG_NOSIGNAL);
      }
      open_ = open;
      std::this_thread::sleep_for(50ms);
    }
  }
  int port_;
  std::vector<Conn> conns_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> open_{0};
  std::atomic<uint64_t> reopened_{0};
};

TEST_F(HttpAbuseTest, ScrapesAnswerWithinASecondUnderAThousandAbusiveConnections) {
  const rlim_t nofile = raise_nofile(8192);
  const std::size_t n = std::min<std::size_t>(1000, nofile > 200 ? nofile - 200 : 0);
  if (n < 1000)
    std::printf("note: RLIMIT_NOFILE allows %llu descriptors: the attack uses %zu connections\n",
                static_cast<unsigned long long>(nofile), n);
  ASSERT_GE(n, 100u) << "too few descriptors for the test";
  ASSERT_TRUE(start_broker());
  ASSERT_TRUE(get(port_, "/metrics", 5s).whole) << "no scrape before the attack";

  Attack attack(port_, n);
  attack.start();
  std::this_thread::sleep_for(1500ms);  // every attacker connected and trickling
  std::size_t scrapes = 0, late = 0;
  Clock::duration slowest{};
  const auto end = Clock::now() + 8s;
  while (Clock::now() < end) {
    for (const char* path : {"/metrics", "/healthz"}) {
      const Answer a = get(port_, path, 1s);
      ++scrapes;
      slowest = std::max(slowest, a.took);
      if (!a.whole) {
        ++late;
        ADD_FAILURE() << path << " not answered within 1 s under " << attack.open()
                      << " abusive connections; got: " << a.text.substr(0, 120);
      }
    }
    std::this_thread::sleep_for(250ms);
  }
  const std::size_t open_at_end = attack.open();
  attack.stop();
  std::printf(
      "attack: %zu connections (%zu open at the end, %llu reopened); %zu answers, "
      "%zu late, slowest %.1f ms\n",
      n, open_at_end, static_cast<unsigned long long>(attack.reopened()), scrapes, late,
      std::chrono::duration<double, std::milli>(slowest).count());
  EXPECT_EQ(late, 0u);
  EXPECT_GE(scrapes, 40u);
  EXPECT_GE(open_at_end, n * 8 / 10) << "the attack did not keep its connections up";
  EXPECT_TRUE(broker_.alive());
  // Cuts are logged, and rate-limited: one line per kind per 10 s, plus at most one
  // summary line per kind per second.
  const std::string log = broker_.log();
  const std::size_t cut_lines = count_of(log, "metrics: cut ");
  const std::size_t closed_lines = count_of(log, "metrics: closed ");
  EXPECT_GE(cut_lines + closed_lines, 1u) << "no cut was logged";
  EXPECT_LE(cut_lines + closed_lines, 40u) << "cuts are not rate-limited";
}

// Default bound: 16 connections per address. 24 silent connections from one address: the
// 8 oldest are closed at once, the 16 newest stay; another address is untouched and the
// crowded address still gets an answer.
TEST_F(HttpAbuseTest, OneAddressHoldsAtMostItsBoundOfConnections) {
  ASSERT_TRUE(start_broker());
  const int other = connect_from("127.0.4.2", port_, false);
  ASSERT_GE(other, 0);
  std::vector<int> fds;
  for (int i = 0; i < 24; ++i) {
    fds.push_back(connect_from("127.0.4.1", port_, false));
    ASSERT_GE(fds.back(), 0);
    std::this_thread::sleep_for(10ms);  // accepted in this order
  }
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(closed_within(fds[i], 1000ms)) << "connection " << i;
  for (int i = 8; i < 24; ++i) EXPECT_FALSE(closed_within(fds[i], 0ms)) << "connection " << i;
  EXPECT_FALSE(closed_within(other, 0ms));
  const Answer a = get(port_, "/healthz", 1s, "127.0.4.1");
  EXPECT_TRUE(a.whole) << a.text;
  for (int fd : fds) ::close(fd);
  ::close(other);
  EXPECT_NE(broker_.log().find("the limit per address"), std::string::npos);
}

TEST_F(HttpAbuseTest, BadMetricsFlagsStopTheStartWithAnErrorNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--metrics-request-timeout", "0"}, "--metrics-request-timeout"},
      {{"--metrics-request-timeout", "soon"}, "--metrics-request-timeout"},
      {{"--metrics-request-timeout", "600001"}, "--metrics-request-timeout"},
      {{"--metrics-max-connections", "0"}, "--metrics-max-connections"},
      {{"--metrics-max-connections", "-5"}, "--metrics-max-connections"},
      {{"--metrics-max-per-peer", "0"}, "--metrics-max-per-peer"},
      {{"--metrics-max-connections", "8", "--metrics-max-per-peer", "9"},
       "--metrics-max-per-peer (9) must not exceed --metrics-max-connections (8)"},
  };
  for (const auto& [args, expected] : cases) {
    std::vector<std::string> argv = {FRACGPU_TEST_BROKER_BIN,
                                     "--run-dir",
                                     broker_.run_dir(),
                                     "--state-dir",
                                     broker_.state_dir(),
                                     "--driver",
                                     FRACGPU_TEST_FAKE_DRIVER,
                                     "--metrics-listen",
                                     "127.0.0.1:" + std::to_string(port_)};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = run_process(argv, broker_.env(), 20s);
    EXPECT_NE(r.status, 0) << args[0] << " " << args[1];
    EXPECT_NE((r.err + r.out).find(expected), std::string::npos)
        << args[0] << " " << args[1] << ": " << r.err << r.out;
  }
}

TEST_F(HttpAbuseTest, TheProbeAsksTheAdminSocketAndFailsWithoutABroker) {
  const std::vector<std::string> probe = {FRACGPU_TEST_BROKER_BIN, "--probe",         "--run-dir",
                                          broker_.run_dir(),       "--probe-timeout", "2000"};
  const auto before = Clock::now();
  const ProcessResult none = run_process(probe, broker_.env(), 20s);
  EXPECT_EQ(none.status, 1) << none.err;
  EXPECT_NE(none.err.find("admin.sock"), std::string::npos) << none.err;
  EXPECT_LT(Clock::now() - before, 5s);
  ASSERT_TRUE(start_broker());
  // While the metrics port is crowded, the probe does not care.
  std::vector<int> crowd;
  for (int i = 0; i < 64; ++i) crowd.push_back(connect_from("127.0.5.1", port_, false));
  const ProcessResult up = run_process(probe, broker_.env(), 20s);
  EXPECT_EQ(up.status, 0) << up.err;
  EXPECT_NE(up.out.find("fracgpu-broker --probe: ok ("), std::string::npos) << up.out;
  for (int fd : crowd)
    if (fd >= 0) ::close(fd);
}

}  // namespace
}  // namespace fracgpu::test
