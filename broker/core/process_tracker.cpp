// pidfd-based process watching and /proc parsing for ProcessTracker. The start time is
// read AFTER the pidfd is opened: if it still matches, the pidfd refers to the very
// process that registered (a pidfd pins one process, never a reused pid).
#include "core/process_tracker.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace fracgpu::broker {
namespace {

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

}  // namespace

std::optional<uint64_t> process_start_time(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return std::nullopt;
  // comm (field 2) may contain spaces and parentheses: fields resume after the LAST ')'.
  const std::size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index) {
    if (index == 22) {
      try {
        return std::stoull(field);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

bool process_matches(pid_t pid, uint64_t start_time) {
  const auto actual = process_start_time(pid);
  return actual && *actual == start_time;
}

ProcessTracker::~ProcessTracker() {
  while (!watches_.empty()) drop(watches_.begin());
}

bool ProcessTracker::watch(const std::string& tenant, uint32_t slot, pid_t pid,
                           uint64_t start_time) {
  const Key key{tenant, slot};
  if (watches_.count(key)) return true;
  const int fd = pidfd_open(pid);
  if (fd < 0) {
    if (errno != ESRCH) spdlog::error("pidfd_open({}) failed: {}", pid, std::strerror(errno));
    return false;
  }
  if (!process_matches(pid, start_time)) {
    ::close(fd);
    return false;
  }
  const EventLoop::Id id = loop_.add(fd, EPOLLIN, [this, key](uint32_t) { on_exit(key); });
  if (id == 0) {
    ::close(fd);
    return false;
  }
  watches_[key] = Watch{pid, start_time, fd, id};
  return true;
}

bool ProcessTracker::watching(const std::string& tenant, uint32_t slot) const {
  return watches_.count(Key{tenant, slot}) != 0;
}

std::vector<ProcessTracker::Watched> ProcessTracker::watches_of(const std::string& tenant) const {
  std::vector<Watched> out;
  for (auto it = watches_.lower_bound(Key{tenant, 0});
       it != watches_.end() && it->first.first == tenant; ++it) {
    out.push_back({it->first.second, it->second.pid, it->second.start_time});
  }
  return out;
}

void ProcessTracker::forget_tenant(const std::string& tenant) {
  for (auto it = watches_.lower_bound(Key{tenant, 0});
       it != watches_.end() && it->first.first == tenant;) {
    auto next = std::next(it);
    drop(it);
    it = next;
  }
}

void ProcessTracker::on_exit(Key key) {  // by value: drop() destroys the watch that holds it
  auto it = watches_.find(key);
  if (it == watches_.end()) return;
  const pid_t pid = it->second.pid;
  drop(it);
  on_death_(key.first, key.second, pid);
}

void ProcessTracker::drop(std::map<Key, Watch>::iterator it) {
  loop_.remove(it->second.loop_id);
  ::close(it->second.pidfd);
  watches_.erase(it);
}

}  // namespace fracgpu::broker
