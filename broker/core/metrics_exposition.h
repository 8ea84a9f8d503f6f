// The Prometheus exposition of a metrics snapshot (tenant_metrics.h), with prometheus-cpp:
// a fresh prometheus::Registry per scrape, its families, gauges, counters and histograms
// filled from the snapshot, serialised by prometheus::TextSerializer (text format 0.0.4,
// label values escaped by the library).
//
// Why a fresh registry rather than a long-lived one: every value already lives elsewhere
// (the shared-memory ledgers, the schedulers, the audit), and a prometheus::Counter can
// only be incremented, so mirroring live counters into long-lived ones would mean
// tracking deltas and resets per series, and removing by hand the series of every deleted
// tenant or GPU. Built from the snapshot, each counter is exactly the live value and a
// deleted tenant's series cannot outlive it. The cost (a few microseconds per series, on
// the metrics thread, outside the broker's state mutex) is in docs/monitoring.md.
// Names, types and labels follow the contract in docs/monitoring.md.
#pragma once

#include <memory>
#include <string>

#include "core/tenant_metrics.h"

namespace prometheus {
class Registry;
}

namespace fracgpu::broker {

// The registry of one scrape: every family of the contract, filled from `snapshot`.
std::unique_ptr<prometheus::Registry> build_metrics_registry(const MetricsSnapshot& snapshot);

// The text exposition of a registry.
std::string serialize_metrics(const prometheus::Registry& registry);

// Both: what GET /metrics answers.
std::string render_metrics(const MetricsSnapshot& snapshot);

}  // namespace fracgpu::broker
