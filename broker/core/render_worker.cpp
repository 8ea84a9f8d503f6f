// The coalescing render thread of render_worker.h.
#include "core/render_worker.h"

#include <exception>

namespace fracgpu::broker {

RenderWorker::RenderWorker(std::function<HttpResponse()> render, std::function<void()> on_done)
    : render_(std::move(render)), on_done_(std::move(on_done)) {
  thread_ = std::thread([this] { run(); });
}

RenderWorker::~RenderWorker() {
  stop();
}

uint64_t RenderWorker::ask() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A render already running took its figures before this ask: wait for the next one.
  asked_ = started_ + 1;
  wake_.notify_one();
  return asked_;
}

RenderWorker::Rendered RenderWorker::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return latest_;
}

void RenderWorker::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void RenderWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || asked_ > started_; });
    if (stopping_) return;
    started_ = asked_;
    const uint64_t generation = started_;
    lock.unlock();
    auto response = std::make_shared<HttpResponse>();
    try {
      *response = render_();
    } catch (const std::exception& e) {  // the render reports what it refuses by throwing
      response->status = 500;
      response->body = std::string("cannot render: ") + e.what() + "\n";
    }
    lock.lock();
    latest_ = {generation, std::move(response)};
    lock.unlock();
    on_done_();
    lock.lock();
  }
}

}  // namespace fracgpu::broker
