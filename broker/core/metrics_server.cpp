// cpp-httplib glue for MetricsServer.
#include "core/metrics_server.h"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <exception>

#include "core/metrics_exposition.h"

namespace fracgpu::broker {

Result<ListenAddress> parse_listen_address(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  const std::string bad =
      "--metrics-listen '" + text + "' must be ADDR:PORT (e.g. 127.0.0.1:9400 or :9400)";
  if (colon == std::string::npos) return Result<ListenAddress>::failure(bad);
  ListenAddress a;
  a.host = text.substr(0, colon);
  if (a.host.size() >= 2 && a.host.front() == '[' && a.host.back() == ']')
    a.host = a.host.substr(1, a.host.size() - 2);
  if (a.host.empty()) a.host = "0.0.0.0";
  const std::string port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return Result<ListenAddress>::failure(bad);
  }
  a.port = std::stoi(port);
  if (a.port < 1 || a.port > 65535) return Result<ListenAddress>::failure(bad);
  return a;
}

MetricsServer::MetricsServer(std::mutex& state_mutex, std::function<MetricsSnapshot()> snapshot)
    : state_mutex_(state_mutex),
      snapshot_(std::move(snapshot)),
      server_(std::make_unique<httplib::Server>()) {}

MetricsServer::~MetricsServer() {
  stop();
}

Status MetricsServer::start(const ListenAddress& address) {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    try {
      MetricsSnapshot snapshot;
      {
        std::lock_guard<std::mutex> lock(state_mutex_);
        snapshot = snapshot_();
      }
      std::string text;
      {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        text = render_metrics(snapshot, cache_);
      }
      res.set_content(std::move(text), "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {  // prometheus-cpp reports what it refuses by throwing
      spdlog::error("metrics: cannot render the scrape: {}", e.what());
      res.status = 500;
      res.set_content(std::string("cannot render metrics: ") + e.what() + "\n", "text/plain");
    }
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  if (!server_->bind_to_port(address.host.c_str(), address.port)) {
    return Status::failure("cannot listen for metrics on " + address.host + ":" +
                           std::to_string(address.port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  spdlog::info("metrics on http://{}:{}/metrics", address.host, address.port);
  return {};
}

void MetricsServer::stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

}  // namespace fracgpu::broker
