// The Prometheus exposition of a metrics snapshot (tenant_metrics.h), with prometheus-cpp's
// data model: SnapshotCollectable is a prometheus::Collectable that builds the contract's
// MetricFamily list straight from one snapshot (the way an exporter mirrors another
// system's state), and prometheus::TextSerializer writes it (text format 0.0.4, label
// values escaped by the library).
//
// Why not a prometheus::Registry of Family<Gauge>/Family<Counter>: every value already
// lives elsewhere (the shared-memory ledgers, the schedulers, the audit) and a
// prometheus::Counter can only be incremented, so long-lived metrics would need deltas and
// resets tracked per series and the series of every deleted tenant removed by hand; a
// registry built fresh per scrape is exact but costs a hashed Family::Add, a metric object
// and a Collect copy per series (69 ms at 1,000 tenants). Built from the snapshot, each
// counter is exactly the live value, a deleted tenant's series cannot outlive it, and a
// series costs one ClientMetric. Series appear in snapshot order (tenants as the registry
// lists them); labels sorted by name, as Registry would give them.
// Cost at 1,000 tenants: docs/monitoring.md ("Cost"), bench/metrics_scrape_bench.cpp.
// Names, types and labels follow the contract in docs/monitoring.md.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tenant_metrics.h"

namespace fracgpu::broker {

// The contract's families for one snapshot, for a prometheus::Registry or Exposer
// (RegisterCollectable) or for render_metrics. The snapshot must outlive it.
class SnapshotCollectable : public prometheus::Collectable {
 public:
  explicit SnapshotCollectable(const MetricsSnapshot& snapshot) : snapshot_(snapshot) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const MetricsSnapshot& snapshot_;
};

// What one scrape costs is mostly prometheus::TextSerializer writing 3.4 MB through an
// std::ostream a character at a time (1,000 tenants x 16 families). On a node most series
// keep their value from one scrape to the next (limits, requests, weights, the counters of
// idle tenants), so ExpositionCache keeps, per family, the line TextSerializer wrote for
// each series with the value it wrote, and only the series whose value (or labels) changed
// go through TextSerializer again, in one Serialize call per family. Every byte is still
// TextSerializer's: the text is exactly what TextSerializer::Serialize(families) gives
// (the serializer has no state across series; metrics_test checks the equality).
// Histograms (one per GPU) are serialised whole each time. A series that disappears (a
// deleted tenant) is dropped from the cache at the next scrape.
// Cost: a comparison of each series' labels with the previous scrape's series at the same
// place (series come in the same order), a copy of its line; TextSerializer only for what
// changed. Not thread-safe: one per scraping thread, or behind a mutex.
class ExpositionCache {
 public:
  // The text exposition of `families`, reusing the lines of unchanged series.
  std::string render(const std::vector<prometheus::MetricFamily>& families);

  std::size_t reused() const { return reused_; }          // series taken from the cache
  std::size_t serialized() const { return serialized_; }  // series serialised this time

 private:
  static constexpr std::size_t kLookAhead = 4;
  struct Line {
    std::vector<prometheus::ClientMetric::Label> labels;
    uint64_t value_bits = 0;
    std::string text;  // one line, with its '\n'
  };
  struct FamilyCache {
    std::string header;       // "# HELP ...\n# TYPE ...\n"
    std::vector<Line> lines;  // the previous scrape's series, in order
  };
  static const Line* match(const std::vector<Line>& previous, std::size_t& cursor,
                           const prometheus::ClientMetric& m);
  void render_family(const prometheus::MetricFamily& family, std::string& out);

  std::unordered_map<std::string, FamilyCache> families_;  // by family name
  std::size_t reused_ = 0, serialized_ = 0;
};

// The text exposition of families, by prometheus::TextSerializer, into one string
// reserved ahead (the families' series times a typical line).
std::string serialize_metrics(const std::vector<prometheus::MetricFamily>& families);

// Both: what GET /metrics answers (the cache: the metrics server's, kept across scrapes).
std::string render_metrics(const MetricsSnapshot& snapshot);
std::string render_metrics(const MetricsSnapshot& snapshot, ExpositionCache& cache);

}  // namespace fracgpu::broker
