// A cgroup of its own for `fracgpu run` (issue 27, row 5), where the host allows it: a
// child of the run's cgroup v2 cgroup (<mount><path>/fracgpu-run-<pid>), which root, or a
// user whose cgroup is delegated to it (systemd Delegate=yes), may create. `fracgpu run`
// moves itself there before it registers in its tenant and before the command starts, so
// the command and everything it starts are born inside, and the broker, which reads each
// registered process's cgroup (core/cgroup_identity.h), attributes any process found in it
// to the tenant, wherever its ancestry went. At the end the stopper (descendant_stopper.h)
// also stops whatever the cgroup still holds; the CLI then moves back and removes it (and,
// when it makes one, removes the empty cgroups of earlier runs that were SIGKILLed).
// Where it cannot be made (a cgroup v1 node, a hierarchy not writable by the caller,
// --cgroup off) the run falls back to attribution by ancestry alone — still complete for
// descendants, since `fracgpu run` is their child subreaper — and why_not() says why.
// plan_run_cgroup is pure (the two /proc texts in, a directory or a reason out).
// Cost: a few small reads and writes at the start and the end of a run.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace fracgpu::cli {

struct CgroupPlan {
  std::string dir;      // the run's current cgroup v2 directory; empty when none usable
  std::string why_not;  // set when dir is empty
};

// From /proc/self/mountinfo and /proc/self/cgroup.
CgroupPlan plan_run_cgroup(std::string_view mountinfo, std::string_view self_cgroup);

class RunCgroup {
 public:
  enum class Mode { kAuto, kOff };
  // Creates the cgroup and moves this process into it, or records why not.
  static RunCgroup enter(Mode mode);
  RunCgroup() = default;
  RunCgroup(RunCgroup&& other) noexcept;
  RunCgroup& operator=(RunCgroup&&) = delete;
  RunCgroup(const RunCgroup&) = delete;
  ~RunCgroup() { leave(); }

  bool active() const { return !path_.empty(); }
  const std::string& path() const { return path_; }  // the cgroup's directory
  const std::string& why_not() const { return why_not_; }
  // One sentence: which attribution is in force for this run.
  std::string attribution() const;
  std::vector<pid_t> pids() const;  // cgroup.procs
  // Moves this process back to the cgroup it came from and removes the run's cgroup; a
  // warning on stderr when something is still in it.
  void leave();

 private:
  std::string parent_, path_, why_not_;
};

}  // namespace fracgpu::cli
