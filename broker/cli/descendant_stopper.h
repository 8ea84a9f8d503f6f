// What `fracgpu run` does with the processes its command leaves behind (issue 27, row 5):
// when the command exits, every descendant still alive — a daemon it started, a
// double-forked `setsid` grandchild that dropped the preload and holds GPU memory — gets
// SIGTERM; those still alive after the grace period (--stop-grace, default 5 s) get
// SIGKILL, repeated until none is left or kKillWait passes (a process in uninterruptible
// sleep). A signal to `fracgpu run` during the grace (Ctrl-C, a second `kill`) ends the
// grace at once. So no process of the run outlives it holding GPU memory. `fracgpu run` is
// the child subreaper of its command (command_runner.h): orphans reparent to it, so
// "descendants" includes every process whose ancestry leads back to the command.
// Pure decision code over DescendantPort (process_tree.h is the real one: /proc and
// pidfds), tested with fake time and a fake process table.
// Cost: nothing while the command runs; afterwards one /proc scan per poll (50 ms) while
// descendants remain.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace fracgpu::cli {

struct LiveProcess {
  pid_t pid = 0;
  uint64_t start_time = 0;  // tells it from a later process with the same pid
  bool operator<(const LiveProcess& o) const {
    return pid != o.pid ? pid < o.pid : start_time < o.start_time;
  }
};

class DescendantPort {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~DescendantPort() = default;
  // The descendants alive now (zombies are reaped or skipped: they hold nothing).
  virtual std::vector<LiveProcess> alive() = 0;
  // `sig` to exactly that process (by pid and start time); false when it was not sent.
  virtual bool signal(const LiveProcess& process, int sig) = 0;
  virtual Clock::time_point now() = 0;
  virtual void pause(std::chrono::milliseconds how_long) = 0;
  // True once `fracgpu run` itself was asked to stop: the grace ends now.
  virtual bool hurry() = 0;
};

struct StopOutcome {
  std::size_t terminated = 0;  // exited after SIGTERM, within the grace
  std::size_t killed = 0;      // got SIGKILL
  std::vector<pid_t> left;     // still alive at the end (none, unless a kill could not land)
  bool any() const { return terminated + killed + left.size() > 0; }
};

inline constexpr std::chrono::milliseconds kStopPoll{50};
inline constexpr std::chrono::milliseconds kKillWait{2000};

StopOutcome stop_descendants(DescendantPort& port, std::chrono::milliseconds grace);

}  // namespace fracgpu::cli
