// The optional Prometheus endpoint (--metrics-listen ADDR:PORT): GET /metrics served by
// cpp-httplib on its own thread. It renders under the broker's state mutex, the same
// one the event loop holds while handling events, so a scrape sees a consistent view.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.h"

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
  MetricsServer(std::mutex& state_mutex, std::function<std::string()> render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds synchronously (so a busy port is reported at start), then serves on a thread.
  Status start(const ListenAddress& address);
  void stop();

 private:
  std::mutex& state_mutex_;
  std::function<std::string()> render_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace fracgpu::broker
