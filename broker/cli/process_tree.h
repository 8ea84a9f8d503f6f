// The real DescendantPort of `fracgpu run` (descendant_stopper.h): its descendants read
// from /proc (CONFIG_PROC_CHILDREN is often off, so by one scan of every /proc/<pid>/stat
// and the parent links), plus whatever else sits in the run's own cgroup when it has one
// (run_cgroup.h); signals through pidfds (common/pidfd_signal.h), so a pid reused after
// the scan is never hit. The subtree of an excluded pid (a private broker the CLI
// started) is left alone. Zombie children of this process are reaped on the way.
// reap_orphans() is the same reaping alone, for the SIGCHLD of an orphan that exits while
// the command still runs (a subreaper inherits orphans' exit statuses).
// Cost: one pass over /proc (a few hundred small reads) per call.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "cli/descendant_stopper.h"

namespace fracgpu::cli {

struct ProcEntry {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';
  uint64_t start_time = 0;
};

// Every process /proc shows (those that vanish during the scan are skipped).
std::vector<ProcEntry> scan_processes(const std::string& proc_root = "/proc");

// The live (not zombie) descendants of `root` in `table`, not entering the subtrees of
// `excluded`. Pure.
std::vector<LiveProcess> descendants_of(pid_t root, const std::vector<ProcEntry>& table,
                                        const std::vector<pid_t>& excluded);

// waitpid(WNOHANG) on every zombie child of this process except `keep`; the number reaped.
int reap_orphans(const std::vector<pid_t>& keep);

class ProcessTree : public DescendantPort {
 public:
  // `cgroup_pids`: the pids in the run's own cgroup (empty function: none).
  ProcessTree(std::vector<pid_t> excluded, std::function<std::vector<pid_t>()> cgroup_pids,
              const std::atomic<bool>& hurry);
  std::vector<LiveProcess> alive() override;
  bool signal(const LiveProcess& process, int sig) override;
  Clock::time_point now() override { return Clock::now(); }
  void pause(std::chrono::milliseconds how_long) override;
  bool hurry() override { return hurry_.load(); }

 private:
  std::vector<pid_t> excluded_;
  std::function<std::vector<pid_t>()> cgroup_pids_;
  const std::atomic<bool>& hurry_;
};

}  // namespace fracgpu::cli
