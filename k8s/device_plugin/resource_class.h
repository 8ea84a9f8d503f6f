// Slice classes: the extended resources the plugin advertises, one DevicePlugin endpoint
// each. The kubelet's Allocate carries only device IDs — no pod, no annotations — so the
// only way a pod can ask for a priority class is the resource name it requests. Every GPU
// has one index space of slices: indices [0, N-H) are `fracgpu.io/gpu-slice` (normal),
// [N-H, N) are `fracgpu.io/gpu-slice-high` (carved out of the same N, so the GPU's
// guaranteed memory is never counted twice), and [N, N+B) are the best-effort slices
// `fracgpu.io/gpu-slice-besteffort`, which are extra: they carry no memory guarantee and
// borrow only memory no one is guaranteed (the broker's overcommit). All classes size a
// slice the same way, capacity/N and 100/N of compute, so "one slice" means the same cap
// whichever resource it came from; what differs is the guarantee and the priority class.
// Keeping normal at the bottom of the range means a node without high slices names its
// slices exactly as before, and the disjoint ranges make slice IDs and tenant names
// unique across classes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device_plugin/plugin_config.h"

namespace fracgpu::k8s {

enum class SliceClass { normal, high, besteffort };

struct ResourceClass {
  SliceClass kind = SliceClass::normal;
  std::string resource_name;  // e.g. fracgpu.io/gpu-slice-high
  std::string endpoint_name;  // our socket's name in the kubelet's plugin directory
  std::string tenant_prefix;  // "s-", "h-" or "b-": names never collide across classes
  std::string priority;       // the broker's priority class: normal, high, low
  std::string label;          // "normal", "high", "besteffort": logs and the class annotation
  int first_index =
      0;  // this class's slice indices on each GPU: [first_index, first_index + count)
  int count = 0;
  int slices_per_gpu = 0;  // N: a slice is capacity/N of memory and 100/N of compute
  bool guaranteed = true;  // memory_request = memory_limit, or 0 (best effort)

  bool owns(int index) const { return index >= first_index && index < first_index + count; }
};

// What a container holding k slices of a class gets on its GPU (capacity = the GPU's
// memory minus the broker's --reserve). memory_limit = capacity·k/N in every class,
// never above the capacity (best-effort slices may outnumber N); memory_request equals it
// for the guaranteed classes and is 0 for best effort; compute = 100·k/N as a weight
// (1–100), never a ceiling, because the broker refuses a ceiling on a high tenant.
struct SliceQuota {
  uint64_t memory_limit = 0;
  uint64_t memory_request = 0;
  int compute = 0;
};
SliceQuota quota_for(const ResourceClass& cls, uint64_t capacity, int k);

// The classes `config` advertises, in registration order (normal, high, best effort);
// a class with no slices is left out entirely (not registered with the kubelet).
std::vector<ResourceClass> resource_classes(const PluginConfig& config);

// The endpoint socket of a class: the normal class uses `base` (--endpoint) itself, the
// others insert "-high" / "-besteffort" before its ".sock" suffix.
std::string class_endpoint(const std::string& base, SliceClass kind);

}  // namespace fracgpu::k8s
