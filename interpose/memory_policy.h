// MemoryPolicy: the shim's memory quota, shared by every allocation hook. It exists
// only when this process belongs to a tenant (registered with the broker); without
// one, MemoryPolicy::active() is null and the hooks only forward. Reservation always
// happens before the real allocation and is released if the driver call fails, so
// racing threads and processes of one tenant can never overshoot its cap.
#pragma once

#include <cuda.h>

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/allocation_table.h"
#include "core/tenant_session.h"
#include "device_resolver.h"
#include "driver_calls.h"

namespace fracgpu::shim {

// A device of this process as the quota sees it.
struct TenantDevice {
  CUdevice ordinal = 0;
  int index = kNoTenantDevice;  // into TenantQuota::devices
};

class MemoryPolicy {
 public:
  // Registers with the broker when a tenant socket is configured or present. Returns
  // false only when a configured broker cannot be reached (the shim then fails closed).
  static bool start(const std::string& socket_path, bool socket_explicit, void* driver_handle,
                    std::string* error);
  static MemoryPolicy* active() { return instance_; }

  TenantSession& session() { return session_; }
  const DriverCalls& driver() const { return calls_; }

  bool current_device(TenantDevice* out);
  TenantDevice device(CUdevice ordinal);

  // Charges `bytes` to the device (asking the broker for burst when needed). On
  // refusal logs one line naming the cap and returns CUDA_ERROR_OUT_OF_MEMORY.
  CUresult reserve(const TenantDevice& device, uint64_t bytes, const char* api);
  void release(int index, uint64_t bytes);
  // Records the charge of a new allocation; a stale row under the same key (the driver
  // reused an address whose allocation vanished without a free, e.g. in a context reset)
  // is released rather than leaked.
  void remember(AllocationTable MemoryPolicy::*table, uint64_t key, const ChargedAllocation& charge);

  // What `cuMemGetInfo` / `cuDeviceTotalMem` report for a device of the tenant.
  void clamp_memory_info(const TenantDevice& device, size_t* free_bytes, size_t* total_bytes);

  AllocationTable device_memory;  // cuMemAlloc*, managed, pitch: pointer -> charge
  AllocationTable async_memory;   // stream-ordered allocations: pointer -> charge, owner = pool
  AllocationTable vmm_handles;    // cuMemCreate handles (see vmm_hooks.cpp for mappings)
  AllocationTable arrays;         // CUarray and CUmipmappedArray handles
  AllocationTable contexts;       // created contexts: their footprint

  // Primary-context footprint: charged when this process first retains it on a device;
  // the bytes charged are remembered so that release returns exactly them.
  struct PrimaryCharge {
    int retains = 0;
    int index = kNoTenantDevice;
    uint64_t bytes = 0;
  };
  // VMM: physical memory is freed only once its handle is released *and* unmapped
  // everywhere, so the charge follows both (vmm_hooks.cpp).
  struct VmmHandleState {
    int mappings = 0;
    bool released = false;
  };
  std::mutex vmm_mutex;
  std::unordered_map<uint64_t, VmmHandleState> vmm_state;  // by handle
  std::map<uint64_t, uint64_t> vmm_mappings;               // mapped address -> handle

  std::mutex primary_mutex;
  std::unordered_map<CUdevice, PrimaryCharge> primary_retains;

 private:
  static inline MemoryPolicy* instance_ = nullptr;
  TenantSession session_;
  DriverCalls calls_;
  DeviceResolver resolver_;
};

}  // namespace fracgpu::shim
