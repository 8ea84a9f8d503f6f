// The broker's single-threaded event loop: epoll over sockets, pidfds, a signalfd and
// timerfds. Handlers are identified by a registration id rather than by fd, so an
// event already fetched for a closed fd can never reach a newer handler that happens
// to get the same fd number. An optional mutex is held while handlers run, which is
// how other threads (the metrics endpoint) read broker state consistently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace fracgpu::broker {

class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;
  using Id = uint64_t;

  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  bool valid() const { return epoll_fd_ >= 0; }

  // Watches `fd` (not owned) for `events` (EPOLLIN...). Returns 0 on failure.
  Id add(int fd, uint32_t events, Handler handler);
  bool modify(Id id, uint32_t events);
  // Stops watching; safe from inside any handler, including the removed one.
  void remove(Id id);

  // Calls `fn` every `period` (first call after one period). Owned by the loop.
  Id add_timer(std::chrono::milliseconds period, std::function<void()> fn);

  // Ends run() on SIGINT/SIGTERM (blocked and read through a signalfd).
  bool stop_on_signals();

  void set_state_mutex(std::mutex* m) { state_mutex_ = m; }

  // Dispatches events until stop() is called.
  void run();
  void stop() { running_ = false; }

 private:
  struct Entry {
    int fd = -1;
    bool owned_fd = false;  // timerfd/signalfd created by the loop
    Handler handler;
  };
  void dispatch(Id id, uint32_t events);
  void collect_garbage();

  int epoll_fd_ = -1;
  Id next_id_ = 1;
  bool running_ = false;
  std::mutex* state_mutex_ = nullptr;
  std::unordered_map<Id, Entry> entries_;
  std::vector<Entry> graveyard_;  // removed during dispatch; destroyed after the batch
};

}  // namespace fracgpu::broker
