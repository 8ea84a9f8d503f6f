// The optional Prometheus endpoint (--metrics-listen ADDR:PORT): GET /metrics and GET
// /healthz, served by HttpFront (http_front.h: one epoll thread, per-connection deadlines
// a trickle cannot extend, bounded connections per peer and in total) so that no client,
// however slow or numerous, stalls a scrape. A scrape takes its snapshot
// (tenant_metrics.h) under the broker's state mutex, the same one the event loop holds
// while handling events, so it sees a consistent view; the families are built and
// serialised (metrics_exposition.h) after the mutex is released, so the loop waits only
// for the copy. The render runs on RenderWorker's thread, one render for every scrape
// waiting, and keeps one ExpositionCache across scrapes, so only series whose value
// changed since the last scrape go through TextSerializer. /healthz is answered on the
// front's own thread and says only that the endpoint serves: the Kubernetes probes use
// `fracgpu-broker --probe` (health_probe.h), which asks the event loop itself.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/result.h"
#include "core/http_front.h"
#include "core/metrics_exposition.h"
#include "core/tenant_metrics.h"

namespace fracgpu::broker {

// "127.0.0.1:9400", ":9400" (all interfaces), "[::1]:9400".
Result<ListenAddress> parse_listen_address(const std::string& text);

class MetricsServer {
 public:
  MetricsServer(std::mutex& state_mutex, std::function<MetricsSnapshot()> snapshot,
                HttpLimits limits = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds synchronously (so a busy port is reported at start), then serves on a thread.
  // The broker's state mutex must not be held by the caller of stop() (a render in
  // progress may be waiting for it).
  Status start(const ListenAddress& address);
  void stop();
  int port() const { return front_.port(); }

 private:
  HttpResponse render();

  std::mutex& state_mutex_;
  std::function<MetricsSnapshot()> snapshot_;
  ExpositionCache cache_;  // the render thread's only
  HttpFront front_;
};

}  // namespace fracgpu::broker
