// Tenants the kubelet has allocated but whose container has not started yet: what keeps an
// init container's tenant alive while the app container's Allocate takes over its slices.
//
// Why: the kubelet calls Allocate for EVERY container of a pod at admission, before any of
// them starts, and hands an init container's devices to the app container after it (its
// device manager "reuses" them: init containers run to completion first). The app
// container's slices then overlap the init container's; on a GPU whose guarantees are
// taken, the broker refuses the second tenant, and a holder of those slices without a
// running process used to be deleted as "a container that has gone" (allocation_builder.h)
// — here it is a container that has not started yet, which would then find its tenant gone
// and fail closed. So the plugin announces PreStartContainer (pre_start_required): an
// Allocate marks its tenant here; a holder still marked is never deleted; the tenant whose
// creation waits on one is made at its own PreStartContainer, which the kubelet calls
// right before creating that container (after the init containers have run).
// A mark older than `limit` no longer protects (an Allocate whose pod never started: the
// kubelet gave up, or the node restarted); marks live in memory only, so a restarted
// plugin falls back to deleting holders without processes at Allocate.
// Thread-safe (every DevicePluginService of the plugin shares one). Cost: a map lookup.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace fracgpu::k8s {

class PendingStarts {
 public:
  using Clock = std::chrono::steady_clock;
  // An image pull before the first start may take many minutes: half an hour of grace.
  static constexpr std::chrono::minutes kDefaultLimit{30};

  explicit PendingStarts(std::chrono::milliseconds limit = kDefaultLimit) : limit_(limit) {}

  void allocated(const std::string& tenant, Clock::time_point now = Clock::now());
  void started(const std::string& tenant);
  // Allocated, not started, and marked within the limit.
  bool awaiting(const std::string& tenant, Clock::time_point now = Clock::now()) const;

 private:
  const std::chrono::milliseconds limit_;
  mutable std::mutex mutex_;
  std::map<std::string, Clock::time_point> marked_;
};

}  // namespace fracgpu::k8s
