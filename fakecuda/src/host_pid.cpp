// Host pids of the simulated device's processes (see host_pid.h): the namespace check,
// the pid helper's client and server. Nothing here is on a hot path: it runs once per
// process registration, once per sweep, and per engine hand-over check.
#include "host_pid.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "process_table.h"

namespace fakecuda {
namespace {

constexpr int kHelperTimeoutMs = 2000;

bool fill_address(const std::string& path, sockaddr_un& address, std::string& error) {
  address = sockaddr_un{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    error = "pid helper socket path \"" + path + "\" is empty or too long";
    return false;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return true;
}

// One line "<pid> <start_time> <host_ns>" from the helper at `path`.
bool ask_helper(const std::string& path, ProcessPlace& place, std::string& error) {
  sockaddr_un address{};
  if (!fill_address(path, address, error)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  timeval timeout{kHelperTimeoutMs / 1000, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    error = "cannot reach the pid helper at " + path + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  char line[128] = {};
  size_t length = 0;
  while (length + 1 < sizeof line) {
    const ssize_t n = ::read(fd, line + length, sizeof line - 1 - length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    length += static_cast<size_t>(n);
    if (std::memchr(line, '\n', length) != nullptr) break;
  }
  ::close(fd);
  long long pid = 0;
  unsigned long long start = 0;
  unsigned long long ns = 0;
  if (std::sscanf(line, "%lld %llu %llu", &pid, &start, &ns) != 3 || pid <= 0 || pid > INT32_MAX) {
    error = "the pid helper at " + path + " gave no pid for this process (\"" +
            std::string(line, length) + "\"): is it in an ancestor PID namespace?";
    return false;
  }
  place.host_pid = static_cast<int32_t>(pid);
  place.host_start_time = start;
  place.host_ns = ns;
  return true;
}

}  // namespace

uint64_t own_pid_namespace() {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

std::string pid_helper_socket(const std::string& segment_name) {
  const char* raw = std::getenv("FAKECUDA_PID_SOCKET");
  if (raw != nullptr && raw[0] != '\0') return raw;
  return "/dev/shm" + segment_name + ".pids";
}

std::optional<ProcessPlace> resolve_own_place(uint64_t host_ns, const std::string& segment_name,
                                              std::string& error) {
  ProcessPlace place;
  place.pid_ns = own_pid_namespace();
  place.host_ns = host_ns;
  const pid_t pid = ::getpid();
  if (place.pid_ns == 0 || host_ns == 0 || place.pid_ns == host_ns) {
    // The host namespace (or no /proc to tell: the old behaviour, own pid).
    place.host_pid = static_cast<int32_t>(pid);
    place.host_start_time = process_start_time(pid).value_or(0);
    return place;
  }
  const std::string path = pid_helper_socket(segment_name);
  if (!ask_helper(path, place, error)) {
    error = "this process is in another PID namespace than the simulated device's host, and " +
            error + " (run `fakecuda-ctl pid-helper` in the host namespace and mount its socket)";
    return std::nullopt;
  }
  if (place.host_ns != host_ns) {
    error = "the pid helper at " + path + " runs in PID namespace " +
            std::to_string(place.host_ns) + ", not in the device's host namespace " +
            std::to_string(host_ns);
    return std::nullopt;
  }
  return place;
}

bool process_alive(int32_t pid, uint64_t start_time, const ProcessPlace& place) {
  const uint64_t here = own_pid_namespace();
  if (place.pid_ns == 0 || here == 0 || here == place.pid_ns) return process_alive(pid, start_time);
  if (here == place.host_ns && place.host_pid > 0)
    return process_alive(place.host_pid, place.host_start_time);
  return true;  // not visible from this namespace: only the host or its own may judge
}

bool process_stopped(int32_t pid, const ProcessPlace& place) {
  const uint64_t here = own_pid_namespace();
  if (place.pid_ns == 0 || here == 0 || here == place.pid_ns) return process_stopped(pid);
  if (here == place.host_ns && place.host_pid > 0) return process_stopped(place.host_pid);
  return false;
}

bool serve_pid_helper(const std::string& path, unsigned mode, const volatile int& stop,
                      const std::function<void()>& ready, std::string& error) {
  sockaddr_un address{};
  if (!fill_address(path, address, error)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  struct stat old {};
  if (::lstat(path.c_str(), &old) == 0 && S_ISSOCK(old.st_mode)) ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::chmod(path.c_str(), mode) != 0 || ::listen(fd, 64) != 0) {
    error = "cannot serve " + path + ": " + std::strerror(errno);
    ::close(fd);
    return false;
  }
  const uint64_t ns = own_pid_namespace();
  if (ready) ready();
  while (stop == 0) {
    pollfd waiting{fd, POLLIN, 0};
    if (::poll(&waiting, 1, 200) <= 0) continue;
    const int peer = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (peer < 0) continue;
    ucred credentials{};
    socklen_t length = sizeof credentials;
    long long pid = 0;
    unsigned long long start = 0;
    // The kernel gives the peer's pid as this namespace numbers it (0 when it cannot).
    if (::getsockopt(peer, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 &&
        credentials.pid > 0) {
      pid = credentials.pid;
      start = process_start_time(credentials.pid).value_or(0);
    }
    char line[128];
    const int n = std::snprintf(line, sizeof line, "%lld %llu %" PRIu64 "\n", pid, start, ns);
    (void)::send(peer, line, static_cast<size_t>(n), MSG_NOSIGNAL | MSG_DONTWAIT);
    ::close(peer);
  }
  ::close(fd);
  ::unlink(path.c_str());
  return true;
}

}  // namespace fakecuda
