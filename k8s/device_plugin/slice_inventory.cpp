// The advertised slices and their health (rules in slice_inventory.h).
#include "device_plugin/slice_inventory.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "device_plugin/slice_ids.h"

namespace fracgpu::k8s {

bool SliceInventory::apply(const std::vector<BrokerGpu>& answer) {
  std::lock_guard lock(mutex_);
  bool changed = false;
  for (auto& known : gpus_) {
    const bool present = std::any_of(answer.begin(), answer.end(),
                                     [&](const BrokerGpu& g) { return g.uuid == known.info.uuid; });
    if (known.healthy && !present) {
      spdlog::warn("GPU {} ({}) is gone from the broker's list: its slices are now Unhealthy",
                   known.info.uuid, known.info.name);
      known.healthy = false;
      changed = true;
    }
  }
  for (const auto& gpu : answer) {
    auto it = std::find_if(gpus_.begin(), gpus_.end(),
                           [&](const KnownGpu& k) { return k.info.uuid == gpu.uuid; });
    if (it == gpus_.end()) {
      spdlog::info("GPU {} {} ({}, {} bytes): advertising its slices", gpu.index, gpu.uuid,
                   gpu.name, gpu.memory_total);
      gpus_.push_back({gpu, true});
      changed = true;
      continue;
    }
    it->info = gpu;  // the index may change across broker restarts; the UUID does not
    if (!it->healthy) {
      spdlog::info("GPU {} is back in the broker's list: its slices are Healthy again", gpu.uuid);
      it->healthy = true;
      changed = true;
    }
  }
  if (changed) {
    ++generation_;
    changed_.notify_all();
  }
  return changed;
}

bool SliceInventory::refresh(const BrokerAdmin& broker) {
  auto answer = broker.gpus();
  // One warning per outage, not one per poll: a broker down for minutes must not flood the log.
  if (!answer) {
    if (broker_answered_) {
      spdlog::warn("cannot read the GPU list from the broker (keeping the last known health): {}",
                   answer.error());
    } else {
      spdlog::debug("still no GPU list from the broker: {}", answer.error());
    }
    broker_answered_ = false;
    return false;
  }
  if (!broker_answered_) spdlog::info("the broker at {} answers", broker.run_dir());
  broker_answered_ = true;
  apply(*answer);
  return true;
}

std::vector<AdvertisedSlice> SliceInventory::slices(const ResourceClass& cls) const {
  std::lock_guard lock(mutex_);
  std::vector<AdvertisedSlice> out;
  out.reserve(gpus_.size() * static_cast<std::size_t>(std::max(0, cls.count)));
  for (const auto& gpu : gpus_) {
    for (int k = cls.first_index; k < cls.first_index + cls.count; ++k) {
      out.push_back({format_slice_id(gpu.info.uuid, k), gpu.healthy});
    }
  }
  return out;
}

std::optional<KnownGpu> SliceInventory::gpu(const std::string& uuid) const {
  std::lock_guard lock(mutex_);
  for (const auto& known : gpus_) {
    if (known.info.uuid == uuid) return known;
  }
  return std::nullopt;
}

uint64_t SliceInventory::generation() const {
  std::lock_guard lock(mutex_);
  return generation_;
}

uint64_t SliceInventory::wait_for_change(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return stopped_ || generation_ != seen; });
  return generation_;
}

void SliceInventory::stop() {
  std::lock_guard lock(mutex_);
  stopped_ = true;
  changed_.notify_all();
}

bool SliceInventory::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

}  // namespace fracgpu::k8s
