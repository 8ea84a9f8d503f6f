// epoll/timerfd/signalfd plumbing for EventLoop. Removal during dispatch moves the
// entry to a graveyard instead of destroying it, because the handler being removed may
// be the one currently executing (a connection closing itself).
#include "core/event_loop.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace fracgpu::broker {

EventLoop::EventLoop() : epoll_fd_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (epoll_fd_ < 0) spdlog::critical("epoll_create1 failed: {}", std::strerror(errno));
}

EventLoop::~EventLoop() {
  for (auto& [id, e] : entries_) {
    if (e.owned_fd) ::close(e.fd);
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

EventLoop::Id EventLoop::add(int fd, uint32_t events, Handler handler) {
  const Id id = next_id_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    spdlog::error("epoll_ctl(ADD, fd {}) failed: {}", fd, std::strerror(errno));
    return 0;
  }
  entries_[id] = Entry{fd, false, std::move(handler)};
  return id;
}

bool EventLoop::modify(Id id, uint32_t events) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  return ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, it->second.fd, &ev) == 0;
}

void EventLoop::remove(Id id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
  if (it->second.owned_fd) ::close(it->second.fd);
  graveyard_.push_back(std::move(it->second));
  entries_.erase(it);
}

EventLoop::Id EventLoop::add_timer(std::chrono::milliseconds period, std::function<void()> fn) {
  const int fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) {
    spdlog::error("timerfd_create failed: {}", std::strerror(errno));
    return 0;
  }
  itimerspec spec{};
  spec.it_interval.tv_sec = period.count() / 1000;
  spec.it_interval.tv_nsec = (period.count() % 1000) * 1000000;
  spec.it_value = spec.it_interval;
  ::timerfd_settime(fd, 0, &spec, nullptr);
  const Id id = add(fd, EPOLLIN, [fd, fn = std::move(fn)](uint32_t) {
    uint64_t expirations = 0;
    if (::read(fd, &expirations, sizeof expirations) == sizeof expirations) fn();
  });
  if (id == 0) {
    ::close(fd);
    return 0;
  }
  entries_[id].owned_fd = true;
  return id;
}

bool EventLoop::stop_on_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  if (::pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return false;
  const int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return false;
  const Id id = add(fd, EPOLLIN, [this, fd](uint32_t) {
    signalfd_siginfo info{};
    if (::read(fd, &info, sizeof info) == sizeof info) {
      spdlog::info("received signal {}, shutting down", info.ssi_signo);
      stop();
    }
  });
  if (id == 0) {
    ::close(fd);
    return false;
  }
  entries_[id].owned_fd = true;
  return true;
}

void EventLoop::dispatch(Id id, uint32_t events) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;  // removed earlier in this batch
  // Copy: the handler may remove itself (moving its Entry to the graveyard) while running.
  Handler handler = it->second.handler;
  handler(events);
}

void EventLoop::collect_garbage() {
  graveyard_.clear();
}

void EventLoop::run() {
  running_ = true;
  std::array<epoll_event, 64> events{};
  while (running_) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), 1000);
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::critical("epoll_wait failed: {}", std::strerror(errno));
      return;
    }
    std::unique_lock<std::mutex> lock;
    if (state_mutex_ != nullptr) lock = std::unique_lock<std::mutex>(*state_mutex_);
    for (int i = 0; i < n; ++i) {
      try {
        dispatch(events[static_cast<std::size_t>(i)].data.u64,
                 events[static_cast<std::size_t>(i)].events);
      } catch (const std::exception& e) {
        spdlog::error("internal error while handling an event: {}", e.what());  // never fatal
      }
    }
    collect_garbage();
  }
}

}  // namespace fracgpu::broker
