// The pidfd sequence of pidfd_signal.h and its system calls.
#include "common/pidfd_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/proc_stat.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace fracgpu::broker {

std::optional<uint64_t> parse_stat_start_time(const std::string& stat) {
  const auto parsed = parse_proc_stat(stat);
  if (!parsed || parsed->gone()) return std::nullopt;
  return parsed->start_time;
}

int SystemPidfdOps::open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

std::optional<uint64_t> SystemPidfdOps::start_time(pid_t pid) {
  const auto parsed = read_proc_stat(pid, root_);
  if (!parsed || parsed->gone()) return std::nullopt;
  return parsed->start_time;
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
