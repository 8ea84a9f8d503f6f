// Watching the processes registered in tenant ledgers. Each watched process gets a
// pidfd (pidfd_open, Linux >= 5.3) in the event loop; it becomes readable the moment
// the process exits, whatever the state of its socket — a closed socket alone proves
// nothing, since the process may simply outlive a broker restart. Start times
// (field 22 of /proc/<pid>/stat) tell a process apart from a later one that reused
// its pid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/event_loop.h"

namespace fracgpu::broker {

// Field 22 of /proc/<pid>/stat (clock ticks since boot), nullopt if there is no such process.
std::optional<uint64_t> process_start_time(pid_t pid);

// True when `pid` exists and was started at `start_time`.
bool process_matches(pid_t pid, uint64_t start_time);

class ProcessTracker {
 public:
  // Called from the event loop when a watched process has exited.
  using DeathHandler = std::function<void(const std::string& tenant, uint32_t slot, pid_t pid)>;

  ProcessTracker(EventLoop& loop, DeathHandler on_death)
      : loop_(loop), on_death_(std::move(on_death)) {}
  ~ProcessTracker();
  ProcessTracker(const ProcessTracker&) = delete;
  ProcessTracker& operator=(const ProcessTracker&) = delete;

  // Watches the process in `slot` of `tenant`; idempotent. False when the process is
  // already gone (or is no longer the one started at `start_time`): the caller reclaims.
  bool watch(const std::string& tenant, uint32_t slot, pid_t pid, uint64_t start_time);
  bool watching(const std::string& tenant, uint32_t slot) const;
  // The broker's own record of who registered where (the ledger's slot fields are
  // tenant-writable; this is not): for the books check and the usage audit.
  struct Watched {
    uint32_t slot = 0;
    pid_t pid = 0;
    uint64_t start_time = 0;
  };
  std::vector<Watched> watches_of(const std::string& tenant) const;  // by slot, ascending
  void forget_tenant(const std::string& tenant);
  std::size_t size() const { return watches_.size(); }

 private:
  struct Watch {
    pid_t pid = 0;
    uint64_t start_time = 0;
    int pidfd = -1;
    EventLoop::Id loop_id = 0;
  };
  using Key = std::pair<std::string, uint32_t>;
  void on_exit(Key key);
  void drop(std::map<Key, Watch>::iterator it);

  EventLoop& loop_;
  DeathHandler on_death_;
  std::map<Key, Watch> watches_;
};

}  // namespace fracgpu::broker
