// What the usage audit (usage_audit.h) may learn about, and do to, a process on this
// node: its start time (to tell it from a later process that reuses its pid), its parent
// and its cgroup; and SIGKILL. Behind a port so that the audit's decisions are tested
// with fake process trees; ProcfsProcessPort is the real one (/proc, and a pidfd for the
// kill: common/pidfd_signal.h). The cgroup file is read through a CgroupReader of its
// own, so that a test can give real processes the "0::/" of a host whose cgroups say
// nothing (and the broker's --audit-cgroups off does the same on purpose).
// Cost: describe() reads /proc/<pid>/stat and /proc/<pid>/cgroup (two small files); the
// audit calls it once per process it has not seen before, not per tick.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/pidfd_signal.h"

namespace fracgpu::broker {

struct ProcessFacts {
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat
  int32_t ppid = 0;
  std::string cgroup;  // /proc/<pid>/cgroup as read, every line (cgroup_identity.h parses it)
};

class ProcessPort {
 public:
  virtual ~ProcessPort() = default;
  // nullopt when there is no such process (or it is a zombie).
  virtual std::optional<ProcessFacts> describe(int32_t pid) = 0;
  // SIGKILL to the process `pid` that started at `start_time`, and to no other: false
  // when it could not be sent (gone, the pid reused, or not permitted).
  virtual bool kill(int32_t pid, uint64_t start_time) = 0;
};

// The text of /proc/<pid>/cgroup ("" when it cannot be read).
class CgroupReader {
 public:
  virtual ~CgroupReader() = default;
  virtual std::string read(int32_t pid) = 0;
};

class ProcfsCgroupReader : public CgroupReader {
 public:
  explicit ProcfsCgroupReader(std::string proc_root = "/proc") : root_(std::move(proc_root)) {}
  std::string read(int32_t pid) override;

 private:
  std::string root_;
};

// Every process in the root of the unified hierarchy and nowhere else ("0::/"), as on a
// host where cgroups tell nothing about tenants: attribution then rests on ancestry.
class RootOnlyCgroupReader : public CgroupReader {
 public:
  std::string read(int32_t) override { return "0::/"; }
};

class ProcfsProcessPort : public ProcessPort {
 public:
  explicit ProcfsProcessPort(std::string proc_root = "/proc");
  ProcfsProcessPort(CgroupReader& cgroups, PidfdOps& pidfds, std::string proc_root = "/proc");
  std::optional<ProcessFacts> describe(int32_t pid) override;
  bool kill(int32_t pid, uint64_t start_time) override;

 private:
  std::string root_;
  ProcfsCgroupReader own_cgroups_;
  CgroupReader& cgroups_;
  PidfdOps& pidfds_;
};

}  // namespace fracgpu::broker
