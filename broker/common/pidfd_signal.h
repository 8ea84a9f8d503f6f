// Signalling one exact process, never a later one that reuses its pid (issue 27, row 6).
// A pid names whichever process holds it now; a pidfd names one process for good. So the
// process is pinned first (pidfd_open), its start time is read AFTER that (field 22 of
// /proc/<pid>/stat), and the signal goes through the pidfd (pidfd_send_signal):
//  - recycled before the open: the pidfd pins the newcomer, whose start time differs: no
//    signal;
//  - recycled between the open and the read: the read sees the newcomer: no signal;
//  - gone after the read: the pidfd still names the old (dead) process: ESRCH, the
//    newcomer is not touched.
// If the start time matches, the process that held the pid at the read held it since
// before the open (it started earlier and a pid is not handed out twice at once), so the
// pidfd names exactly it. The system calls sit behind PidfdOps so that tests recycle a
// pid between any two of them. Used by the usage audit's kill (core/usage_audit.h) and by
// `fracgpu run` when it stops what its command left behind (cli/descendant_stopper.h).
// Cost: one pidfd_open, one small /proc read, one pidfd_send_signal, one close.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fracgpu::broker {

class PidfdOps {
 public:
  virtual ~PidfdOps() = default;
  virtual int open(pid_t pid) = 0;  // a pidfd, or -1 with errno
  // Field 22 of /proc/<pid>/stat (clock ticks since boot); nullopt when there is no such
  // process or it is a zombie (it holds nothing and cannot be stopped again).
  virtual std::optional<uint64_t> start_time(pid_t pid) = 0;
  virtual int send_signal(int pidfd, int sig) = 0;  // 0, or -1 with errno
  virtual void close(int pidfd) = 0;
};

// The real system calls (pidfd_open/pidfd_send_signal: Linux >= 5.3) and /proc under
// `proc_root`.
class SystemPidfdOps : public PidfdOps {
 public:
  explicit SystemPidfdOps(std::string proc_root = "/proc") : root_(std::move(proc_root)) {}
  int open(pid_t pid) override;
  std::optional<uint64_t> start_time(pid_t pid) override;
  int send_signal(int pidfd, int sig) override;
  void close(int pidfd) override;

 private:
  std::string root_;
};

// The process-wide SystemPidfdOps over /proc.
PidfdOps& system_pidfd_ops();

// Sends `sig` to the process `pid` that started at `start_time`; false when that process
// is gone (or was never there), when the pid now names another process, or when the
// signal is not permitted. Never signals pid <= 1.
bool signal_exact_process(PidfdOps& ops, pid_t pid, uint64_t start_time, int sig);

// Field 22 of the text of a /proc/<pid>/stat file (common/proc_stat.h); nullopt when
// malformed or a zombie.
std::optional<uint64_t> parse_stat_start_time(const std::string& stat);

}  // namespace fracgpu::broker
