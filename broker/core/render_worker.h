// The one thread that renders the broker's /metrics answer for http_front.h, away from
// the sockets. No client can hold it: it never reads or writes a socket, it only runs
// the render (a snapshot under the broker's state mutex, then serialisation) and
// publishes the result. Scrapes are coalesced: every request asked before a render
// started is answered by that render, so N concurrent scrapes cost one render, and a
// flood of complete requests costs at most one render at a time (back to back), never a
// queue of them. A request asked while a render is running is answered by the next one
// (it must not get figures taken before it asked).
//
// Thread use: ask() and latest() from the I/O thread; the render and `on_done` on the
// worker thread (on_done wakes the I/O thread, e.g. by writing an eventfd).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace fracgpu::broker {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class RenderWorker {
 public:
  struct Rendered {
    uint64_t generation = 0;  // 0: nothing rendered yet
    std::shared_ptr<const HttpResponse> response;
  };

  RenderWorker(std::function<HttpResponse()> render, std::function<void()> on_done);
  ~RenderWorker();
  RenderWorker(const RenderWorker&) = delete;
  RenderWorker& operator=(const RenderWorker&) = delete;

  // Asks for a render; returns the generation whose result answers this ask.
  uint64_t ask();
  // The latest finished render.
  Rendered latest() const;
  // Ends the thread once the render in progress (if any) is done.
  void stop();

 private:
  void run();

  std::function<HttpResponse()> render_;
  std::function<void()> on_done_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  uint64_t asked_ = 0;    // the newest generation some request waits for
  uint64_t started_ = 0;  // the generation being (or last) rendered
  bool stopping_ = false;
  Rendered latest_;
  std::thread thread_;
};

}  // namespace fracgpu::broker
