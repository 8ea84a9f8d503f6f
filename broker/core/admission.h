// Admission control: whether a tenant definition fits the node. Limits must fit the
// GPU (capacity = total memory minus the operator's reserve), requests must not exceed
// limits, and the guaranteed requests of all tenants on a GPU must fit its capacity —
// that last rule is what makes every request always obtainable under overcommit. A
// limit of kMemoryLimitAvailable ("memory_limit":"available") becomes the capacity
// minus the other tenants' requests.
// Refusals are one sentence naming the GPU and the numbers involved.
#pragma once

#include <cstdint>
#include <span>

#include "common/result.h"
#include "core/gpu_inventory.h"
#include "core/tenant_spec.h"

namespace fracgpu::broker {

uint64_t gpu_capacity(const GpuInfo& gpu, uint64_t reserve);

// `others` are every other tenant on the node (not the one being admitted). On success
// the spec's devices get the GPUs' UUIDs (and "available" limits their numbers) filled in.
Status admit_tenant(TenantSpec& spec, const GpuInventory& gpus, uint64_t reserve,
                    std::span<const TenantSpec* const> others);

}  // namespace fracgpu::broker
