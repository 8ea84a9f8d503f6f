// Slice identities: how a GPU's N slices are named to the kubelet ("<gpu-uuid>::<k>"),
// and how the set of slices a container was given becomes the name of its broker
// tenant. The tenant name is a pure function of the slice IDs, so a restarted
// container (Allocate called again with the same IDs) finds its tenant again, and the
// name also says which slices it holds, so a stale tenant still holding a slice that
// the kubelet has handed to someone else can be recognised without any saved state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fracgpu::k8s {

inline constexpr const char* kSliceSeparator = "::";
// Slice indices per GPU (all classes together) are a bitmask in the tenant name; 64
// keeps it one uint64.
inline constexpr int kMaxSlicesPerGpu = 64;
// One prefix per slice class (resource_class.h), so that tenant names never collide
// across classes; "s-" is the normal class's, as before classes existed.
inline constexpr const char* kTenantPrefix = "s-";
inline constexpr const char* kHighTenantPrefix = "h-";
inline constexpr const char* kBestEffortTenantPrefix = "b-";

struct SliceId {
  std::string gpu_uuid;
  int index = 0;
  bool operator==(const SliceId&) const = default;
};

std::string format_slice_id(const std::string& gpu_uuid, int index);
// Nullopt for anything that is not "<uuid>::<0..63>".
std::optional<SliceId> parse_slice_id(const std::string& id);

// The tenant of a container holding `slice_indices` (no duplicates) of GPU `gpu_uuid`:
// "<prefix><8 hex digits naming the GPU>-<hex bitmask of the slices>", e.g.
// "s-3fa01c22-c" (normal), "h-3fa01c22-c0" (high).
std::string tenant_name_for(const std::string& gpu_uuid, const std::vector<int>& slice_indices,
                            const std::string& prefix = kTenantPrefix);

// The parts of a tenant name made by tenant_name_for (any class's prefix), or nullopt
// for any other name.
struct TenantSlices {
  std::string prefix;
  std::string gpu_tag;
  uint64_t mask = 0;
};
std::optional<TenantSlices> parse_tenant_name(const std::string& name);

// The GPU part of a tenant name (stable hash of the UUID).
std::string gpu_tag(const std::string& gpu_uuid);

}  // namespace fracgpu::k8s
