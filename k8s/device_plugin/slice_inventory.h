// What the plugin advertises: the broker's GPUs, each cut into slices, with health. One
// inventory serves every slice class (resource_class.h): a GPU's health is the same
// whichever resource its slices are advertised under, and one poll of the broker keeps
// all the classes' ListAndWatch streams current.
// A GPU is learned from the broker's "gpus" answer and stays known for the life of the
// plugin; a later answer that lacks it marks its slices Unhealthy (the kubelet then
// stops scheduling onto them, while containers already using them keep running). When
// the broker cannot be reached the last known state stands: a broker restart is not a
// GPU failure, and Allocate reports the outage itself. Every change bumps a generation
// number that ListAndWatch streams wait on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "device_plugin/broker_admin.h"
#include "device_plugin/resource_class.h"

namespace fracgpu::k8s {

struct AdvertisedSlice {
  std::string id;
  bool healthy = true;
};

struct KnownGpu {
  BrokerGpu info;
  bool healthy = true;
};

class SliceInventory {
 public:
  SliceInventory() = default;

  // Merges one answer of the broker; returns true when anything advertised changed.
  bool apply(const std::vector<BrokerGpu>& gpus);
  // Asks the broker and applies its answer; false (state kept) when it cannot be asked.
  bool refresh(const BrokerAdmin& broker);

  // The slices of class `cls` on every known GPU, GPU by GPU in slice order.
  std::vector<AdvertisedSlice> slices(const ResourceClass& cls) const;
  std::optional<KnownGpu> gpu(const std::string& uuid) const;
  uint64_t generation() const;

  // Blocks until the generation differs from `seen`, stop() is called, or `timeout`
  // passes; returns the current generation.
  uint64_t wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const;
  void stop();
  bool stopped() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::vector<KnownGpu> gpus_;  // in the order first seen, so the advertised list is stable
  uint64_t generation_ = 0;
  bool stopped_ = false;
  // Whether the last poll got an answer (only the polling thread touches it).
  bool broker_answered_ = true;
};

}  // namespace fracgpu::k8s
