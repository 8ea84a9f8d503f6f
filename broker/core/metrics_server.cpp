// The two routes of MetricsServer on HttpFront, and --metrics-listen's parser.
#include "core/metrics_server.h"

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

MetricsServer::MetricsServer(std::mutex& state_mutex, std::function<MetricsSnapshot()> snapshot,
                             HttpLimits limits)
    : state_mutex_(state_mutex), snapshot_(std::move(snapshot)), front_("metrics", limits) {}

MetricsServer::~MetricsServer() {
  stop();
}

HttpResponse MetricsServer::render() {
  HttpResponse res;
  try {
    MetricsSnapshot snapshot;
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      snapshot = snapshot_();
    }
    res.body = render_metrics(snapshot, cache_);
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
  } catch (const std::exception& e) {  // prometheus-cpp reports what it refuses by throwing
    spdlog::error("metrics: cannot render the scrape: {}", e.what());
    res.status = 500;
    res.body = std::string("cannot render metrics: ") + e.what() + "\n";
  }
  return res;
}

Status MetricsServer::start(const ListenAddress& address) {
  front_.route_rendered("/metrics", [this] { return render(); });
  front_.route_inline("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
  if (auto s = front_.start(address); !s) return s;
  spdlog::info("metrics on http://{}:{}/metrics", address.host, front_.port());
  return {};
}

void MetricsServer::stop() {
  front_.stop();
}

}  // namespace fracgpu::broker
