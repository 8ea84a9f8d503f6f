// Which of the plugin's tenants belong to containers that are gone for good: deleted, so
// that deleting a pod releases its tenant as well as its memory (issue 29).
//
// The device-plugin API never tells a plugin that a container ended; the kubelet's
// PodResources API does, by omission: it lists the devices of every container of the pods
// it holds, from their admission (the device manager records an Allocate at once) until the
// pod is removed. A tenant of this plugin (a name tenant_name_for made) that the list no
// longer names, that has no running process and whose container is not waiting to start
// (pending_starts.h) is gone — once that held at `passes` consecutive successful readings
// spanning at least `span`: a kubelet that restarts serves its checkpointed allocations
// again, and one reading that missed a pod must not cost it its tenant. The memory of a
// container's processes is already the broker's to reclaim when they exit; this frees the
// tenant (its guarantee, its directory, its socket).
// Pure: fed the kubelet's tenants, the broker's list and the time; PodAttributionLoop
// (pod_attribution_loop.h) runs it after each successful reading and deletes what it
// returns. Cost: linear in the broker's tenants per reading.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device_plugin/broker_admin.h"

namespace fracgpu::k8s {

class GoneTenants {
 public:
  using Clock = std::chrono::steady_clock;

  GoneTenants(int passes, std::chrono::milliseconds span) : passes_(passes), span_(span) {}

  // One successful reading: `listed` names the tenants of the containers the kubelet lists
  // (attribute_tenants), `broker_tenants` is the broker's "list" reply's array. Returns the
  // tenants to delete now (each once: it is forgotten here as it is returned).
  std::vector<std::string> pass(const std::map<std::string, PodIdentity>& listed,
                                const nlohmann::json& broker_tenants,
                                const std::function<bool(const std::string&)>& awaiting_start,
                                Clock::time_point now);

  std::size_t watched() const { return absent_.size(); }  // tenants counted as absent

 private:
  struct Absence {
    int passes = 0;
    Clock::time_point since;
  };
  const int passes_;
  const std::chrono::milliseconds span_;
  std::map<std::string, Absence> absent_;
};

}  // namespace fracgpu::k8s
