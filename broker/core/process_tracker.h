// Watching the processes registered in tenant ledgers. Each watched process gets a
// pidfd (pidfd_open, Linux >= 5.3); it becomes readable the moment the process exits,
// whatever the state of its socket — a closed socket alone proves nothing, since the
// process may simply outlive a broker restart. Start times (field 22 of
// /proc/<pid>/stat) tell a process apart from a later one that reused its pid.
//
// The pidfds live in an epoll set of their own, which the event loop watches as ONE
// descriptor: when thousands of processes exit at once, each turn of the loop takes at
// most kDeathsPerTurn of them (one epoll_wait, no per-pidfd handler objects) and then
// lets the loop serve what else is ready (the admin socket, registrations) before the
// next batch. The batch-done hook runs once per batch, for work that needs doing once
// however many died (the compute scheduler's re-evaluation).
// Cost: a death is O(log n) in the watches plus the death handler; nothing is scanned.
// Each tenant's watches carry a generation, bumped on every watch and death, so callers
// (books check, audit) can tell "nothing changed" without rebuilding lists.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
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
  static constexpr int kDeathsPerTurn = 64;

  // Called from the event loop when a watched process has exited.
  using DeathHandler = std::function<void(const std::string& tenant, uint32_t slot, pid_t pid)>;

  ProcessTracker(EventLoop& loop, DeathHandler on_death);
  ~ProcessTracker();
  ProcessTracker(const ProcessTracker&) = delete;
  ProcessTracker& operator=(const ProcessTracker&) = delete;

  // Runs after each batch of deaths (from the event loop, after their handlers).
  void set_batch_done(std::function<void()> fn) { batch_done_ = std::move(fn); }

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
  // The same without a copy, for per-step readers (the compute scheduler's ports): fn(slot)
  // for each watched slot of the tenant, ascending. O(log n + the tenant's watches).
  template <typename Fn>
  void for_each_watched(const std::string& tenant, Fn&& fn) const {
    for (auto it = watches_.lower_bound(Key{tenant, 0});
         it != watches_.end() && it->first.first == tenant; ++it)
      fn(it->first.second);
  }
  // Whether any process of the tenant is watched. O(log n).
  bool has_watches(const std::string& tenant) const {
    auto it = watches_.lower_bound(Key{tenant, 0});
    return it != watches_.end() && it->first.first == tenant;
  }
  // The tenants with a watched process, in name order. O(watches): per-tick readers visit
  // the few tenants with processes, not every tenant of the node. A copy, so a reader may
  // act on a tenant (a death, a kill) while it goes through the list.
  std::vector<std::string> watched_tenants() const;
  // Bumped whenever a watch of the tenant starts or ends; 0 for a tenant never watched.
  uint64_t generation(const std::string& tenant) const;
  void forget_tenant(const std::string& tenant);
  std::size_t size() const { return watches_.size(); }

  // Handles up to kDeathsPerTurn exited processes now (what the loop does when the pidfd
  // set is readable); the number handled.
  int reap_some();

 private:
  struct Watch {
    pid_t pid = 0;
    uint64_t start_time = 0;
    int pidfd = -1;
    uint64_t token = 0;  // the pidfd's epoll data: survives fd-number reuse
  };
  using Key = std::pair<std::string, uint32_t>;
  using Watches = std::map<Key, Watch>;
  void drop(Watches::iterator it);
  void bump(const std::string& tenant);

  EventLoop& loop_;
  DeathHandler on_death_;
  std::function<void()> batch_done_;
  int deaths_fd_ = -1;  // epoll set of the pidfds
  EventLoop::Id loop_id_ = 0;
  uint64_t next_token_ = 1;
  uint64_t last_generation_ = 0;
  Watches watches_;
  std::unordered_map<uint64_t, Key> by_token_;
  std::unordered_map<std::string, uint64_t> generations_;
};

}  // namespace fracgpu::broker
