// The node's GPUs as the CUDA driver reports them. The driver is opened with dlopen and
// resolved with dlsym (never linked), so the broker runs — with zero GPUs — on machines
// without a driver, and tests can point it at the simulated driver. Besides index, UUID,
// name and memory, each GPU gets the per-context footprint the shim charges for every
// CUDA context: given by the operator, or measured once at start.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace fracgpu::broker {

struct GpuInfo {
  uint32_t index = 0;
  std::string uuid;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;
  uint64_t memory_total = 0;
  uint64_t context_footprint = 0;  // bytes charged per CUDA context
};

struct InventoryOptions {
  std::string driver_path;                    // empty: $FRACGPU_REAL_DRIVER, else "libcuda.so.1"
  std::optional<uint64_t> context_footprint;  // nullopt: measure ("auto")
};

struct GpuInventory {
  std::vector<GpuInfo> gpus;
  std::string driver_path;  // what was opened
  std::string problem;      // why there are no GPUs (empty when there are)

  const GpuInfo* find(uint32_t index) const;
};

// Enumerates the GPUs. Never fails: a missing driver or a driver error gives an empty
// inventory with `problem` set (logged by the caller).
GpuInventory discover_gpus(const InventoryOptions& options);

// "GPU-" + 8-4-4-4-12 lowercase hex of the 16 UUID bytes.

}  // namespace fracgpu::broker
