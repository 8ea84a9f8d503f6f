// The pidfd sequence of pidfd_signal.h and its system calls.
#include "common/pidfd_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <string_view>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace fracgpu::broker {

std::optional<uint64_t> parse_stat_start_time(const std::string& stat) {
  // comm (field 2) may contain spaces and parentheses: fields resume after the LAST ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::string_view rest = std::string_view(stat).substr(close + 1);
  for (int index = 3; index <= 22; ++index) {
    const std::size_t begin = rest.find_first_not_of(' ');
    if (begin == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(begin);
    const std::size_t end = std::min(rest.find(' '), rest.size());
    if (index == 3 && (rest[0] == 'Z' || rest[0] == 'X')) return std::nullopt;
    if (index == 22) {
      uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + end, value);
      if (ec != std::errc() || ptr != rest.data() + end) return std::nullopt;
      return value;
    }
    rest.remove_prefix(end);
  }
  return std::nullopt;
}

int SystemPidfdOps::open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

std::optional<uint64_t> SystemPidfdOps::start_time(pid_t pid) {
  const std::string path = root_ + "/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::array<char, 1024> buf{};
  const ssize_t n = ::read(fd, buf.data(), buf.size());
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_stat_start_time(std::string(buf.data(), static_cast<std::size_t>(n)));
}

int SystemPidfdOps::send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

void SystemPidfdOps::close(int pidfd) {
  ::close(pidfd);
}

PidfdOps& system_pidfd_ops() {
  static SystemPidfdOps ops;
  return ops;
}

bool signal_exact_process(PidfdOps& ops, pid_t pid, uint64_t start_time, int sig) {
  if (pid <= 1) return false;
  const int pidfd = ops.open(pid);
  if (pidfd < 0) return false;
  const auto started = ops.start_time(pid);  // after the open: see pidfd_signal.h
  const bool same = started && *started == start_time;
  const bool sent = same && ops.send_signal(pidfd, sig) == 0;
  ops.close(pidfd);
  return sent;
}

}  // namespace fracgpu::broker
