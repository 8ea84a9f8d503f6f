// The admin-socket round trip of health_probe.h: connect, one request line, one reply line,
// all within one deadline (a broker that accepts but never answers fails the probe too).
#include "core/health_probe.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "common/unix_socket.h"
#include "fracgpu/paths.h"

namespace fracgpu::broker {
namespace {

using Clock = std::chrono::steady_clock;

int fail(const std::filesystem::path& socket, const std::string& why) {
  std::fprintf(stderr, "fracgpu-broker --probe: %s: %s\n", socket.c_str(), why.c_str());
  return 1;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

int run_health_probe(const std::filesystem::path& run_dir, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::filesystem::path socket = run_dir / paths::kAdminSocketName;
  auto fd = connect_unix(socket, timeout);
  if (!fd) return fail(socket, fd.error());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{*fd};

  const std::string request = "{\"op\":\"gpus\"}\n";
  if (::send(*fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size()))
    return fail(socket, std::string("cannot send the request: ") + std::strerror(errno));

  std::string reply;
  while (reply.find('\n') == std::string::npos) {
    pollfd p{*fd, POLLIN, 0};
    const int left = remaining_ms(deadline);
    const int ready = left == 0 ? 0 : ::poll(&p, 1, left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0)
      return fail(socket, "no reply within " + std::to_string(timeout.count()) + " ms");
    char buf[4096];
    const ssize_t n = ::recv(*fd, buf, sizeof buf, 0);
    if (n <= 0) return fail(socket, "the broker closed the connection without a reply");
    reply.append(buf, static_cast<std::size_t>(n));
    if (reply.size() > (1u << 20)) return fail(socket, "the reply is over 1 MiB");
  }
  const auto json = nlohmann::json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
  if (!json.is_object()) return fail(socket, "the reply is not a JSON object");
  if (!json.value("ok", false))
    return fail(socket, "the broker refused: " + json.value("error", std::string("(no reason)")));
  const auto gpus = json.find("gpus");
  std::printf("fracgpu-broker --probe: ok (%zu GPU(s))\n",
              gpus != json.end() && gpus->is_array() ? gpus->size() : std::size_t{0});
  return 0;
}

}  // namespace fracgpu::broker
