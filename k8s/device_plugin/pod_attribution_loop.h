// The device plugin's pod attribution thread: every --pod-resources-interval seconds
// (default 10), and a few times shortly after each Allocate (the container starts right
// after it, and the kubelet lists its devices from then on), it lists the kubelet's
// PodResources, matches them to tenants (pod_attribution.h) and sends the broker a
// pod-only update for every tenant whose container changed. Allocate only nudges it
// (a mutex held for an assignment), so it never waits for the kubelet or the broker.
// Problems are logged once per kind of problem, then again only every ten minutes while
// they last, and their end is logged once: a node without the API logs one line, not one
// every ten seconds. After each successful reading the tenants whose containers the kubelet
// no longer lists are deleted (gone_tenants.h: three readings spanning two intervals). Cost: one
// List and, when any of our containers is listed, one broker "list" per pass; an update only when a
// tenant's container changed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "device_plugin/broker_admin.h"
#include "device_plugin/gone_tenants.h"
#include "device_plugin/pending_starts.h"
#include "device_plugin/pod_resources_client.h"
#include "device_plugin/resource_class.h"

namespace fracgpu::k8s {

struct PodAttributionSettings {
  std::string socket_path;                    // the kubelet's PodResources socket
  std::chrono::milliseconds interval{10000};  // between periodic passes
  // After an Allocate: a first pass this soon, then `followups` more, `followup_spacing` apart.
  std::chrono::milliseconds after_allocate{500};
  int followups = 3;
  std::chrono::milliseconds followup_spacing{1000};
  std::chrono::minutes repeat_problem_after{10};
};

class PodAttributionLoop {
 public:
  // `pending`: the plugin's containers allocated and not started yet (never deleted).
  PodAttributionLoop(PodAttributionSettings settings, std::vector<ResourceClass> classes,
                     std::string broker_run_dir, const PendingStarts& pending);

  // Passes until `stop` is set (checked at least every 100 ms).
  void run(const std::atomic<bool>& stop);
  // A container has been allocated slices: pass soon. Never blocks.
  void nudge();
  // One pass now (run() calls it; exposed for tests).
  void pass();

 private:
  // What went wrong, by kind (kubelet, broker, update), for the rate-limited log.
  void problem(const std::string& kind, const std::string& sentence);
  void no_problem(const std::string& kind);

  PodAttributionSettings settings_;
  std::vector<ResourceClass> classes_;
  PodResourcesClient kubelet_;
  BrokerAdmin broker_;  // one attempt: the next pass is the retry
  const PendingStarts& pending_;
  GoneTenants gone_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::chrono::steady_clock::time_point nudge_due_ = std::chrono::steady_clock::time_point::max();
  int followups_left_ = 0;

  struct Logged {
    std::string sentence;
    std::chrono::steady_clock::time_point at;
  };
  std::vector<std::pair<std::string, Logged>> problems_;  // by kind; the pass thread's only
};

}  // namespace fracgpu::k8s
