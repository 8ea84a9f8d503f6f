// Best-fit packing of a container's slices onto one GPU (policy in slice_packer.h).
#include "device_plugin/slice_packer.h"

#include <algorithm>
#include <map>
#include <set>

#include "device_plugin/slice_ids.h"

namespace fracgpu::k8s {
namespace {

struct GpuSlices {
  std::vector<std::pair<int, std::string>> free;  // (slice index, ID), kept sorted
};

// Adds IDs from `pool` (in slice order) to `chosen` until it has `size`.
void fill_from(const GpuSlices& gpu, std::vector<std::string>& chosen, std::set<std::string>& taken,
               int size) {
  for (const auto& [index, id] : gpu.free) {
    if (static_cast<int>(chosen.size()) >= size) return;
    if (taken.insert(id).second) chosen.push_back(id);
  }
}

}  // namespace

std::vector<std::string> prefer_slices(const std::vector<std::string>& available,
                                       const std::vector<std::string>& must_include, int size) {
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  for (const auto& id : must_include) {
    if (taken.insert(id).second) chosen.push_back(id);
  }
  if (size <= 0 || static_cast<int>(chosen.size()) >= size) return chosen;

  // std::map: GPUs in UUID order, so equal candidates are broken the same way every time.
  std::map<std::string, GpuSlices> gpus;
  std::vector<std::string> unparsed;
  std::set<std::string> offered;  // an ID listed twice is still one slice
  for (const auto& id : available) {
    if (taken.count(id) || !offered.insert(id).second) continue;
    auto slice = parse_slice_id(id);
    if (!slice) {
      unparsed.push_back(id);
      continue;
    }
    gpus[slice->gpu_uuid].free.emplace_back(slice->index, id);
  }
  for (auto& [uuid, gpu] : gpus) std::sort(gpu.free.begin(), gpu.free.end());

  const int missing = size - static_cast<int>(chosen.size());
  // Pinned: the must-include slices decide the GPU.
  std::string pinned;
  for (const auto& id : must_include) {
    if (auto slice = parse_slice_id(id)) {
      pinned = slice->gpu_uuid;
      break;
    }
  }
  if (!pinned.empty() && gpus.count(pinned)) fill_from(gpus[pinned], chosen, taken, size);
  if (static_cast<int>(chosen.size()) >= size) return chosen;

  if (pinned.empty()) {
    // Best fit: the fewest free slices that still hold the whole request.
    const GpuSlices* best = nullptr;
    for (const auto& [uuid, gpu] : gpus) {
      const int free = static_cast<int>(gpu.free.size());
      if (free >= missing && (best == nullptr || free < static_cast<int>(best->free.size())))
        best = &gpu;
    }
    if (best != nullptr) {
      fill_from(*best, chosen, taken, size);
      return chosen;
    }
  }

  // Nothing fits on one GPU: most free first, so the answer spans as few GPUs as possible.
  std::vector<const GpuSlices*> by_free;
  for (const auto& [uuid, gpu] : gpus) by_free.push_back(&gpu);
  std::stable_sort(by_free.begin(), by_free.end(), [](const GpuSlices* a, const GpuSlices* b) {
    return a->free.size() > b->free.size();
  });
  for (const GpuSlices* gpu : by_free) fill_from(*gpu, chosen, taken, size);
  for (const auto& id : unparsed) {
    if (static_cast<int>(chosen.size()) >= size) break;
    if (taken.insert(id).second) chosen.push_back(id);
  }
  return chosen;
}

}  // namespace fracgpu::k8s
