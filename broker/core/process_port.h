// What the usage audit (usage_audit.h) may learn about, and do to, a process on this
// node: its start time (to tell it from a later process that reuses its pid), its parent
// and its cgroup; and SIGKILL. Behind a port so that the audit's decisions are tested
// with fake process trees; ProcfsProcessPort is the real one (/proc, kill(2)).
// Cost: describe() reads /proc/<pid>/stat and /proc/<pid>/cgroup (two small files); the
// audit calls it once per process it has not seen before, not per tick.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fracgpu::broker {

struct ProcessFacts {
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat
  int32_t ppid = 0;
  std::string cgroup;  // /proc/<pid>/cgroup as one string (cgroup v2: "0::/path")
};

class ProcessPort {
 public:
  virtual ~ProcessPort() = default;
  // nullopt when there is no such process (or it is a zombie).
  virtual std::optional<ProcessFacts> describe(int32_t pid) = 0;
  // SIGKILL; false when it could not be sent (gone, or not permitted).
  virtual bool kill(int32_t pid) = 0;
};

class ProcfsProcessPort : public ProcessPort {
 public:
  explicit ProcfsProcessPort(std::string proc_root = "/proc") : root_(std::move(proc_root)) {}
  std::optional<ProcessFacts> describe(int32_t pid) override;
  bool kill(int32_t pid) override;

 private:
  std::string root_;
};

}  // namespace fracgpu::broker
