// The optional Prometheus endpoint (--metrics-listen ADDR:PORT): GET /metrics served by
// cpp-httplib on its own thread. A scrape takes its snapshot (tenant_metrics.h) under
// the broker's state mutex, the same one the event loop holds while handling events, so
// it sees a consistent view; the families are built and serialised (metrics_exposition.h)
// after the mutex is released, so the loop waits only for the copy. The server keeps one
// ExpositionCache across scrapes (its own mutex: httplib may run two scrapes at once), so
// only series whose value changed since the last scrape go through TextSerializer.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.h"
#include "core/metrics_exposition.h"
#include "core/tenant_metrics.h"

namespace httplib {
class Server;
}

namespace fracgpu::broker {

struct ListenAddress {
  std::string host;
  int port = 0;
};

// "127.0.0.1:9400", ":9400" (all interfaces), "[::1]:9400".
Result<ListenAddress> parse_listen_address(const std::string& text);

class MetricsServer {
 public:
  MetricsServer(std::mutex& state_mutex, std::function<MetricsSnapshot()> snapshot);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds synchronously (so a busy port is reported at start), then serves on a thread.
  Status start(const ListenAddress& address);
  void stop();

 private:
  std::mutex& state_mutex_;
  std::function<MetricsSnapshot()> snapshot_;
  std::mutex cache_mutex_;  // after state_mutex_, never both held
  ExpositionCache cache_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace fracgpu::broker
