// /proc scanning, reaping and pidfd signalling for `fracgpu run` (see process_tree.h).
#include "cli/process_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "common/pidfd_signal.h"
#include "common/proc_stat.h"

namespace fracgpu::cli {
namespace {

std::optional<ProcEntry> read_entry(const std::string& proc_root, pid_t pid) {
  const auto stat = broker::read_proc_stat(pid, proc_root);
  if (!stat) return std::nullopt;
  ProcEntry e;
  e.pid = pid;
  e.state = stat->state;
  e.ppid = stat->ppid;
  e.start_time = stat->gone() ? 0 : stat->start_time;  // a zombie's start time nothing needs
  return e;
}

}  // namespace

std::vector<ProcEntry> scan_processes(const std::string& proc_root) {
  std::vector<ProcEntry> out;
  DIR* dir = ::opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  while (const dirent* d = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (end == d->d_name || *end != '\0' || pid <= 0) continue;
    if (auto e = read_entry(proc_root, static_cast<pid_t>(pid))) out.push_back(*e);
  }
  ::closedir(dir);
  return out;
}

std::vector<LiveProcess> descendants_of(pid_t root, const std::vector<ProcEntry>& table,
                                        const std::vector<pid_t>& excluded) {
  std::multimap<pid_t, const ProcEntry*> children;
  for (const ProcEntry& e : table) children.emplace(e.ppid, &e);
  std::vector<LiveProcess> out;
  std::vector<pid_t> frontier{root};
  std::set<pid_t> seen{root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    auto [begin, end] = children.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      const ProcEntry& e = *it->second;
      if (!seen.insert(e.pid).second) continue;
      if (std::find(excluded.begin(), excluded.end(), e.pid) != excluded.end()) continue;
      if (e.state != 'Z' && e.state != 'X') out.push_back({e.pid, e.start_time});
      frontier.push_back(e.pid);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

int reap_orphans(const std::vector<pid_t>& keep) {
  const pid_t self = ::getpid();
  int reaped = 0;
  for (const ProcEntry& e : scan_processes()) {
    if (e.ppid != self || e.state != 'Z') continue;
    if (std::find(keep.begin(), keep.end(), e.pid) != keep.end()) continue;
    int status = 0;
    reaped += ::waitpid(e.pid, &status, WNOHANG) == e.pid;
  }
  return reaped;
}

ProcessTree::ProcessTree(std::vector<pid_t> excluded,
                         std::function<std::vector<pid_t>()> cgroup_pids,
                         const std::atomic<bool>& hurry)
    : excluded_(std::move(excluded)), cgroup_pids_(std::move(cgroup_pids)), hurry_(hurry) {}

std::vector<LiveProcess> ProcessTree::alive() {
  const pid_t self = ::getpid();
  std::vector<ProcEntry> table = scan_processes();
  // Our zombie children first: reaped, they leave the table (their own children were
  // reparented to us when they exited, so the tree below is already right).
  for (ProcEntry& e : table) {
    if (e.ppid != self || e.state != 'Z') continue;
    if (std::find(excluded_.begin(), excluded_.end(), e.pid) != excluded_.end()) continue;
    int status = 0;
    if (::waitpid(e.pid, &status, WNOHANG) == e.pid) e.state = 'X';
  }
  std::vector<LiveProcess> out = descendants_of(self, table, excluded_);
  if (cgroup_pids_) {
    std::set<pid_t> have;
    for (const LiveProcess& p : out) have.insert(p.pid);
    for (pid_t pid : cgroup_pids_()) {
      if (pid == self || have.count(pid) != 0 ||
          std::find(excluded_.begin(), excluded_.end(), pid) != excluded_.end())
        continue;
      if (auto start = broker::system_pidfd_ops().start_time(pid)) out.push_back({pid, *start});
    }
  }
  return out;
}

bool ProcessTree::signal(const LiveProcess& process, int sig) {
  return broker::signal_exact_process(broker::system_pidfd_ops(), process.pid, process.start_time,
                                      sig);
}

void ProcessTree::pause(std::chrono::milliseconds how_long) {
  std::this_thread::sleep_for(how_long);
}

}  // namespace fracgpu::cli
