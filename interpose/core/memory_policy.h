// MemoryPolicy: the tenant's memory quota as every allocation hook applies it, and the
// one owner of the tenant's ledger in this process (reserve with burst and the pools'
// reclaim, release, charges of memory that already exists, the log line of a refusal).
// Reservation always happens before the real allocation and is released if the driver
// call fails, so racing threads and processes of one tenant can never overshoot the cap.
// A free takes its row out *before* the driver frees, so that another thread getting the
// same address back at once cannot have its fresh row removed by us; if the driver
// refuses, the row goes back.
// Injected: the TenantLink (ledger, broker), DriverCalls (array sizes, pools, the
// current device through DeviceResolver, cuMemFree to undo a pitched allocation) and the
// CaptureTracker (a captured stream-ordered allocation is a graph node, not charged).
// The hook passes the real call as a CallRef; the policy calls it exactly once.
// Cost of an allocation inside the grant: the device lookup (one relaxed load for a
// one-GPU process), one CAS and two uncontended atomics in the ledger, one sharded-table
// insert (~50 ns); stream-ordered ones add the pool mutex (memory_pools.h).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/allocation_table.h"
#include "core/call_ref.h"
#include "core/capture_tracker.h"
#include "core/device_resolver.h"
#include "core/driver_calls.h"
#include "core/memory_pools.h"
#include "core/tenant_link.h"

namespace fracgpu {

class SwapEngine;

// The real driver call of a hook, its arguments bound.
using DriverCall = CallRef<CUresult()>;

// The key of a handle or pointer in an AllocationTable.
template <typename Key>
uint64_t key_of(Key key) {
  if constexpr (std::is_pointer_v<Key>)
    return reinterpret_cast<uintptr_t>(key);
  else
    return static_cast<uint64_t>(key);
}

class MemoryPolicy {
 public:
  MemoryPolicy(TenantLink& tenant, const DriverCalls& calls, DeviceResolver& devices,
               CaptureTracker& captures);

  // --- The ledger (every charge of this process goes through here) ---
  // Charges `bytes` to the device (asking the broker for burst, then the pools for their
  // cached memory, when needed). On refusal logs one line naming the cap and returns
  // CUDA_ERROR_OUT_OF_MEMORY.
  CUresult reserve(const TenantDevice& device, uint64_t bytes, const char* api);
  void release(int index, uint64_t bytes);
  // Counts bytes that exist on the device already (a pool's rounding, graph memory the
  // driver mapped, an array larger than estimated), past the grant if need be; false
  // when they went beyond it (the caller says so in its own log line).
  bool charge_existing(int index, uint64_t bytes);
  uint64_t limit(int index);
  uint64_t used(int index);
  // Records the charge of a new allocation in `table`; a stale row under the same key
  // (the driver reused an address whose allocation vanished without a free, e.g. in a
  // context reset) is released rather than leaked.
  void remember(AllocationTable& table, uint64_t key, const ChargedAllocation& charge);
  // Calls the driver's free/destroy for `key`; on success releases what `table` charged it.
  CUresult uncharged(AllocationTable& table, uint64_t key, DriverCall call);

  TenantLink& tenant() { return tenant_; }
  DeviceResolver& devices() { return devices_; }
  const DriverCalls& driver() const { return calls_; }
  MemoryPools& pools() { return pools_; }

  // --- Device memory: cuMemAlloc*, cuMemAllocManaged, cuMemAllocPitch, cuMemFree ---
  template <typename Ptr>
  CUresult allocate(const char* api, Ptr* dptr, uint64_t bytes, DriverCall call) {
    return allocate_keyed(device_memory_, api, bytes, call,
                          [dptr] { return dptr != nullptr ? key_of(*dptr) : 0; });
  }
  // cuMemAlloc_v2: backed so that it can move to host when the tenant allows swapping
  // (swap_engine.h), else as allocate().
  CUresult allocate_device(CUdeviceptr* dptr, uint64_t bytes, DriverCall call);
  // The driver's allocation `call`; an out-of-memory answer while the tenant is within its
  // guaranteed request is retried for up to kGuaranteeWaitMs (a borrower is being moved).
  static constexpr int64_t kGuaranteeWaitMs = 10'000;
  CUresult guaranteed_call(int index, DriverCall call);
  // The engine that backs swappable allocations (set once, before any allocation).
  void attach_swap(SwapEngine* swap) { swap_ = swap; }
  // cuMemFree of memory another part of the shim serves (the swappable arena of
  // stream-ordered allocations, core/async_arena.h): tried first; nullopt when not its own.
  using FreeRoute = std::optional<CUresult> (*)(CUdeviceptr) noexcept;
  void attach_free_route(FreeRoute route) { free_route_.store(route, std::memory_order_release); }
  // The pitch is the driver's choice: charge width x height first, then the padding.
  // `call` is the real allocation, given where to store the pitch.
  template <typename Ptr, typename Size>
  CUresult allocate_pitched(Ptr* dptr, Size* pitch, std::type_identity_t<Size> width,
                            std::type_identity_t<Size> height,
                            std::type_identity_t<CallRef<CUresult(Size*)>> call) {
    Size chosen = 0;
    CUresult rc =
        allocate("cuMemAllocPitch", dptr, uint64_t{width} * height, [&] { return call(&chosen); });
    if (pitch != nullptr) *pitch = chosen;
    if (rc != CUDA_SUCCESS || chosen <= width) return rc;
    rc = charge_padding(key_of(*dptr), uint64_t{chosen - width} * height);
    if (rc != CUDA_SUCCESS) *dptr = 0;
    return rc;
  }
  // cuMemFree accepts memory from cuMemAlloc* and from pools.
  CUresult free(CUdeviceptr ptr, DriverCall call) { return free_any(ptr, call); }

  // --- What the tenant sees: total = cap, free = cap - used (never more than the device has) ---
  template <typename Size>
  CUresult memory_info(Size* free_bytes, Size* total_bytes, DriverCall call) {
    const CUresult rc = call();
    TenantDevice device;
    if (rc != CUDA_SUCCESS || !devices_.current(&device)) return rc;
    size_t free_now = free_bytes ? *free_bytes : SIZE_MAX,
           total_now = total_bytes ? *total_bytes : 0;
    clamp_memory_info(device, &free_now, &total_now);
    if (free_bytes)
      *free_bytes = static_cast<Size>(std::min<size_t>(free_now, std::numeric_limits<Size>::max()));
    if (total_bytes)
      *total_bytes =
          static_cast<Size>(std::min<size_t>(total_now, std::numeric_limits<Size>::max()));
    return rc;
  }
  template <typename Size, typename Device>
  CUresult total_memory(Size* bytes, Device ordinal, DriverCall call) {
    const CUresult rc = call();
    if (rc != CUDA_SUCCESS || bytes == nullptr) return rc;
    const TenantDevice device = devices_.device(static_cast<CUdevice>(ordinal));
    if (device.index == kNoTenantDevice) return rc;
    const uint64_t cap = std::min<uint64_t>(limit(device.index), std::numeric_limits<Size>::max());
    *bytes = static_cast<Size>(std::min<uint64_t>(uint64_t{*bytes}, cap));
    return rc;
  }
  void clamp_memory_info(const TenantDevice& device, size_t* free_bytes, size_t* total_bytes);

  // --- Arrays: estimated before creation, corrected to the driver's own size after ---
  CUresult create_array(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc, DriverCall call);
  CUresult create_array(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc, DriverCall call);
  CUresult create_mipmapped_array(CUmipmappedArray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                  unsigned levels, DriverCall call);
  CUresult destroy_array(CUarray array, DriverCall call) {
    return uncharged(arrays_, key_of(array), call);
  }
  CUresult destroy_array(CUmipmappedArray array, DriverCall call) {
    return uncharged(arrays_, key_of(array), call);
  }

  // --- Stream-ordered allocation (cuMemAllocAsync, pools; the charge model: memory_pools.h) ---
  // `pool` null: the device's current pool. `per_thread`: a _ptsz variant.
  CUresult allocate_async(CUdeviceptr* dptr, size_t size, CUmemoryPool pool, CUstream stream,
                          bool per_thread, DriverCall call);
  CUresult free_async(CUdeviceptr ptr, CUstream stream, bool per_thread, DriverCall call);
  CUresult trim_pool(CUmemoryPool pool, DriverCall call);
  CUresult destroy_pool(CUmemoryPool pool, DriverCall call);

  // Rows of the tables (tests and status).
  std::size_t device_allocations() const { return device_memory_.size(); }
  std::size_t async_allocations() const { return async_memory_.size(); }
  std::size_t array_allocations() const { return arrays_.size(); }

 private:
  CUresult allocate_keyed(AllocationTable& table, const char* api, uint64_t bytes, DriverCall call,
                          CallRef<uint64_t()> key);
  CUresult charge_padding(uint64_t key, uint64_t extra);

  CUresult free_any(CUdeviceptr ptr, DriverCall call);
  template <typename Handle>
  CUresult created_array(const char* api, Handle* array, uint64_t bytes, DriverCall call);
  bool captured(CUstream stream, bool per_thread) const;
  void release(const MemoryPools::Change& change) { release(change.index, change.bytes); }

  TenantLink& tenant_;
  MemoryLedger& ledger_;
  const DriverCalls& calls_;
  DeviceResolver& devices_;
  CaptureTracker& captures_;
  MemoryPools pools_;
  AllocationTable device_memory_;  // cuMemAlloc*, managed, pitch: pointer -> charge
  AllocationTable async_memory_;   // stream-ordered allocations: pointer -> charge, owner = pool
  AllocationTable arrays_;         // CUarray and CUmipmappedArray handles
  SwapEngine* swap_ = nullptr;
  std::atomic<FreeRoute> free_route_{nullptr};
};

}  // namespace fracgpu
