// GetPreferredAllocation's policy: put a container's slices on one GPU, best fit.
// Among the GPUs that still have enough free slices, the one with the fewest free slices
// wins, so that whole GPUs stay free for large requests (the bin-packing rule that keeps
// fragmentation low). Slices the kubelet says must be included (init-container reuse)
// pin the choice to their GPU. A pure function: the kubelet's request in, IDs out.
#pragma once

#include <string>
#include <vector>

namespace fracgpu::k8s {

// `size` IDs chosen from `available` ∪ `must_include`, all of `must_include` among them.
// When no single GPU can hold the request the answer still has `size` IDs (the kubelet
// expects that many) taken from the fullest-free GPUs first; Allocate will then refuse
// the cross-GPU set with a clear error rather than silently splitting a tenant.
std::vector<std::string> prefer_slices(const std::vector<std::string>& available,
                                       const std::vector<std::string>& must_include, int size);

}  // namespace fracgpu::k8s
