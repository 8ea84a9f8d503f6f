// pidfd-based process watching and /proc parsing for ProcessTracker. The start time is
// read AFTER the pidfd is opened: if it still matches, the pidfd refers to the very
// process that registered (a pidfd pins one process, never a reused pid). Deaths are
// taken from the pidfds' own epoll set a batch at a time (process_tracker.h).
#include "core/process_tracker.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/proc_stat.h"

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
  const auto stat = read_proc_stat(pid);
  if (!stat) return std::nullopt;
  return stat->start_time;
}

bool process_matches(pid_t pid, uint64_t start_time) {
  const auto actual = process_start_time(pid);
  return actual && *actual == start_time;
}

ProcessTracker::ProcessTracker(EventLoop& loop, DeathHandler on_death)
    : loop_(loop), on_death_(std::move(on_death)), deaths_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (deaths_fd_ < 0) {
    spdlog::critical("epoll_create1 for the process watches failed: {}", std::strerror(errno));
    return;
  }
  loop_id_ = loop_.add(deaths_fd_, EPOLLIN, [this](uint32_t) { reap_some(); });
}

ProcessTracker::~ProcessTracker() {
  while (!watches_.empty()) drop(watches_.begin());
  if (loop_id_ != 0) loop_.remove(loop_id_);
  if (deaths_fd_ >= 0) ::close(deaths_fd_);
}

// From one counter for all tenants: a value is never seen twice, even for a tenant
// deleted and created again under the same name.
void ProcessTracker::bump(const std::string& tenant) {
  generations_[tenant] = ++last_generation_;
}

std::vector<std::string> ProcessTracker::watched_tenants() const {
  std::vector<std::string> out;
  for (auto it = watches_.begin(); it != watches_.end();) {
    out.push_back(it->first.first);
    it = watches_.upper_bound(Key{it->first.first, UINT32_MAX});  // past this tenant's slots
  }
  return out;
}

uint64_t ProcessTracker::generation(const std::string& tenant) const {
  auto it = generations_.find(tenant);
  return it == generations_.end() ? 0 : it->second;
}

bool ProcessTracker::watch(const std::string& tenant, uint32_t slot, pid_t pid,
                           uint64_t start_time) {
  Key key{tenant, slot};
  if (watches_.count(key)) return true;
  if (deaths_fd_ < 0) return false;
  const int fd = pidfd_open(pid);
  if (fd < 0) {
    if (errno != ESRCH) spdlog::error("pidfd_open({}) failed: {}", pid, std::strerror(errno));
    return false;
  }
  if (!process_matches(pid, start_time)) {
    ::close(fd);
    return false;
  }
  const uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = token;
  if (::epoll_ctl(deaths_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    spdlog::error("epoll_ctl(ADD, pidfd of {}) failed: {}", pid, std::strerror(errno));
    ::close(fd);
    return false;
  }
  by_token_.emplace(token, key);
  watches_.emplace(std::move(key), Watch{pid, start_time, fd, token});
  bump(tenant);
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
  generations_.erase(tenant);
}

int ProcessTracker::reap_some() {
  std::array<epoll_event, kDeathsPerTurn> events{};
  const int n = ::epoll_wait(deaths_fd_, events.data(), kDeathsPerTurn, 0);
  int handled = 0;
  for (int i = 0; i < n; ++i) {
    auto token = by_token_.find(events[static_cast<std::size_t>(i)].data.u64);
    if (token == by_token_.end()) continue;  // dropped earlier in this batch
    auto it = watches_.find(token->second);
    if (it == watches_.end()) continue;
    const Key key = it->first;  // a copy: drop() destroys the watch that holds it
    const pid_t pid = it->second.pid;
    drop(it);
    ++handled;
    try {
      on_death_(key.first, key.second, pid);
    } catch (const std::exception& e) {  // one death's trouble never stops the others
      spdlog::error("internal error while handling the exit of pid {}: {}", pid, e.what());
    }
  }
  if (handled > 0 && batch_done_) batch_done_();
  return handled;
}

void ProcessTracker::drop(Watches::iterator it) {
  ::epoll_ctl(deaths_fd_, EPOLL_CTL_DEL, it->second.pidfd, nullptr);
  ::close(it->second.pidfd);
  by_token_.erase(it->second.token);
  bump(it->first.first);
  watches_.erase(it);
}

}  // namespace fracgpu::broker
