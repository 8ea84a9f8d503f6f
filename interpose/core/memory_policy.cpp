// The reservation slow path and the allocation operations of MemoryPolicy (see
// memory_policy.h). The fast path is MemoryLedger::try_reserve; everything here beyond
// it (burst requests, reclaim, log lines) runs only when a reservation is refused.
#include "core/memory_policy.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/shim_log.h"
#include "core/swap_engine.h"

namespace fracgpu {
namespace {

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

uint64_t element_bytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    default:
      return 4;  // 32-bit formats; others are corrected after creation
  }
}

uint64_t array_bytes(uint64_t width, uint64_t height, uint64_t depth, CUarray_format format,
                     unsigned channels) {
  return std::max<uint64_t>(width, 1) * std::max<uint64_t>(height, 1) *
         std::max<uint64_t>(depth, 1) * element_bytes(format) * std::max(channels, 1u);
}

uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  uint64_t total = 0, w = d.Width, h = d.Height, z = d.Depth;
  for (unsigned level = 0; level < std::max(levels, 1u); ++level) {
    total += array_bytes(w, h, z, d.Format, d.NumChannels);
    w = std::max<uint64_t>(w / 2, 1), h = h / 2, z = z / 2;
  }
  return total;
}

// The driver's own size of an array, when it can say.
bool array_requirements(const DriverCalls& calls, CUarray array, CUdevice ordinal,
                        CUDA_ARRAY_MEMORY_REQUIREMENTS* req) {
  return calls.cuArrayGetMemoryRequirements != nullptr &&
         calls.cuArrayGetMemoryRequirements(req, array, ordinal) == CUDA_SUCCESS;
}
bool array_requirements(const DriverCalls& calls, CUmipmappedArray array, CUdevice ordinal,
                        CUDA_ARRAY_MEMORY_REQUIREMENTS* req) {
  return calls.cuMipmappedArrayGetMemoryRequirements != nullptr &&
         calls.cuMipmappedArrayGetMemoryRequirements(req, array, ordinal) == CUDA_SUCCESS;
}

}  // namespace

MemoryPolicy::MemoryPolicy(TenantLink& tenant, const DriverCalls& calls, DeviceResolver& devices,
                           CaptureTracker& captures)
    : tenant_(tenant),
      ledger_(tenant.ledger()),
      calls_(calls),
      devices_(devices),
      captures_(captures),
      pools_(calls) {}

CUresult MemoryPolicy::reserve(const TenantDevice& device, uint64_t bytes, const char* api) {
  if (device.index == kNoTenantDevice) {
    FRACGPU_LOG_CAPPED(LogLevel::kError, 16, "%s refused: GPU %d is not assigned to tenant '%s'",
                       api, device.ordinal, tenant_.tenant().c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint32_t index = static_cast<uint32_t>(device.index);
  if (tenant_.needs_registration()) {
    std::string error;
    if (!tenant_.register_forked_child(&error)) {
      FRACGPU_LOG_CAPPED(LogLevel::kError, 4,
                         "%s refused: cannot register this forked process (%s)", api,
                         error.c_str());
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  ReserveOutcome outcome = ledger_.try_reserve(index, bytes);
  std::string burst_error;
  for (int attempt = 0; attempt < 3 && outcome == ReserveOutcome::kOverGrant; ++attempt) {
    if (!tenant_.request_burst(index, bytes, &burst_error)) break;
    outcome = ledger_.try_reserve(index, bytes);
  }
  if (outcome != ReserveOutcome::kReserved) {
    const MemoryPools::Change reclaimed = pools_.reclaim_cached(index);
    release(reclaimed);
    if (reclaimed.bytes > 0)
      outcome = ledger_.try_reserve(index, bytes);  // pools held cached memory; once more
  }
  if (outcome == ReserveOutcome::kReserved) return CUDA_SUCCESS;
  ledger_.count_oom(index);
  if (outcome == ReserveOutcome::kOverLimit) {
    FRACGPU_LOG_CAPPED(
        LogLevel::kError, 16,
        "%s of %llu bytes refused: tenant '%s' is at its memory cap of %s on GPU %d (%s in use)",
        api, static_cast<unsigned long long>(bytes), tenant_.tenant().c_str(),
        gib(ledger_.limit(index)).c_str(), device.ordinal, gib(ledger_.used(index)).c_str());
  } else {
    FRACGPU_LOG_CAPPED(
        LogLevel::kError, 16,
        "%s of %llu bytes refused: tenant '%s' is above its guaranteed %s on GPU %d and the "
        "broker granted no burst (%s)",
        api, static_cast<unsigned long long>(bytes), tenant_.tenant().c_str(),
        gib(ledger_.grant(index)).c_str(), device.ordinal, burst_error.c_str());
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void MemoryPolicy::release(int index, uint64_t bytes) {
  if (index != kNoTenantDevice && index >= 0 && bytes > 0)
    ledger_.release(static_cast<uint32_t>(index), bytes);
}

bool MemoryPolicy::charge_existing(int index, uint64_t bytes) {
  if (index < 0 || bytes == 0) return true;
  if (ledger_.try_reserve(static_cast<uint32_t>(index), bytes) == ReserveOutcome::kReserved)
    return true;
  ledger_.force_charge(static_cast<uint32_t>(index), bytes);
  return false;
}

uint64_t MemoryPolicy::limit(int index) {
  return index < 0 ? 0 : ledger_.limit(static_cast<uint32_t>(index));
}
uint64_t MemoryPolicy::used(int index) {
  return index < 0 ? 0 : ledger_.used(static_cast<uint32_t>(index));
}

void MemoryPolicy::remember(AllocationTable& table, uint64_t key, const ChargedAllocation& charge) {
  if (auto stale = table.insert(key, charge))
    release(static_cast<int>(stale->device), stale->bytes);
}

CUresult MemoryPolicy::uncharged(AllocationTable& table, uint64_t key, DriverCall call) {
  auto charge = table.erase(key);
  CUresult rc = call();
  if (charge && rc != CUDA_SUCCESS) table.insert(key, *charge);
  if (charge && rc == CUDA_SUCCESS) release(static_cast<int>(charge->device), charge->bytes);
  return rc;
}

// Reserve on the current device, then the driver call, and remember the charge in
// `table` under the key of the new allocation. No current device: nothing to charge it to
// (the driver refuses such an allocation itself).
CUresult MemoryPolicy::allocate_keyed(AllocationTable& table, const char* api, uint64_t bytes,
                                      DriverCall call, CallRef<uint64_t()> key) {
  TenantDevice device;
  if (!devices_.current(&device)) return call();
  if (CUresult rc = reserve(device, bytes, api); rc != CUDA_SUCCESS) return rc;
  const CUresult rc = guaranteed_call(device.index, call);
  if (rc != CUDA_SUCCESS) {
    release(device.index, bytes);
    return rc;
  }
  remember(table, key(), {static_cast<uint32_t>(device.index), bytes, 0});
  return rc;
}

// Memory within the tenant's guaranteed request is the tenant's even while a borrower
// still holds it on the GPU: the broker moves the borrower's memory to host within a
// tick plus the copy time (guarantee_enforcer.h), so the driver's "out of memory" is
// waited out for a while instead of being passed on.
CUresult MemoryPolicy::guaranteed_call(int index, DriverCall call) {
  CUresult rc = call();
  if (rc != CUDA_ERROR_OUT_OF_MEMORY || index < 0) return rc;
  const uint32_t device = static_cast<uint32_t>(index);
  const TenantQuota* quota = tenant_.quota();
  const auto within_request = [&] {
    return quota != nullptr &&
           ledger_.used(device) <= quota->devices[device].memory_request.load() &&
           quota->devices[device].memory_request.load() > 0;
  };
  if (!within_request()) return rc;
  FRACGPU_LOG_CAPPED(LogLevel::kInfo, 4,
                     "the GPU is full but tenant '%s' is within its guaranteed %s: waiting for "
                     "the broker to take borrowed memory back",
                     tenant_.tenant().c_str(),
                     gib(quota->devices[device].memory_request.load()).c_str());
  int64_t waited_ms = 0;
  for (int64_t step = 5; rc == CUDA_ERROR_OUT_OF_MEMORY && waited_ms < kGuaranteeWaitMs;
       step = std::min<int64_t>(step * 2, 100)) {
    timespec t{0, static_cast<long>(step * 1'000'000)};
    nanosleep(&t, nullptr);
    waited_ms += step;
    rc = call();
  }
  return rc;
}

CUresult MemoryPolicy::allocate_device(CUdeviceptr* dptr, uint64_t bytes, DriverCall call) {
  TenantDevice device;
  if (swap_ != nullptr && devices_.current(&device)) {
    if (auto rc = swap_->allocate(device, dptr, bytes)) return *rc;
  }
  return allocate("cuMemAlloc", dptr, bytes, call);
}

CUresult MemoryPolicy::charge_padding(uint64_t key, uint64_t extra) {
  auto charge = device_memory_.find(key);
  if (!charge) return CUDA_SUCCESS;
  const TenantDevice device{0, static_cast<int>(charge->device)};
  if (reserve(device, extra, "cuMemAllocPitch") != CUDA_SUCCESS) {
    // The driver's padding does not fit: give the allocation back and report OOM.
    if (auto undo = device_memory_.erase(key)) release(device.index, undo->bytes);
    if (calls_.cuMemFree != nullptr) calls_.cuMemFree(key);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  device_memory_.insert(key, {charge->device, charge->bytes + extra, 0});
  return CUDA_SUCCESS;
}

CUresult MemoryPolicy::free_any(CUdeviceptr ptr, DriverCall call) {
  if (FreeRoute route = free_route_.load(std::memory_order_acquire)) {
    if (auto rc = route(ptr)) return *rc;  // an arena block, maybe at its chunk's base
  }
  if (swap_ != nullptr) {
    if (auto rc = swap_->free(ptr)) return *rc;
  }
  auto plain = device_memory_.erase(ptr);
  auto pooled = plain ? std::nullopt : async_memory_.erase(ptr);
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    if (plain) device_memory_.insert(ptr, *plain);
    if (pooled) async_memory_.insert(ptr, *pooled);
  } else if (plain) {
    release(static_cast<int>(plain->device), plain->bytes);
  } else if (pooled &&
             !pools_.freed(reinterpret_cast<CUmemoryPool>(pooled->owner), pooled->bytes)) {
    release(static_cast<int>(pooled->device), pooled->bytes);  // its pool is already destroyed
  }
  return rc;
}

void MemoryPolicy::clamp_memory_info(const TenantDevice& device, size_t* free_bytes,
                                     size_t* total_bytes) {
  if (device.index == kNoTenantDevice) {  // a device the tenant may not use looks full
    if (free_bytes) *free_bytes = 0;
    return;
  }
  const uint32_t index = static_cast<uint32_t>(device.index);
  release(pools_.reclaim_cached(index));
  const uint64_t cap = ledger_.limit(index);
  const uint64_t in_use = ledger_.used(index) + ledger_.swapped(index);  // on host counts too
  const uint64_t headroom = in_use < cap ? cap - in_use : 0;
  if (total_bytes) *total_bytes = static_cast<size_t>(cap);
  if (free_bytes) *free_bytes = static_cast<size_t>(std::min<uint64_t>(*free_bytes, headroom));
}

// Charges an array's estimated size, then corrects the charge to the driver's own figure.
template <typename Handle>
CUresult MemoryPolicy::created_array(const char* api, Handle* array, uint64_t bytes,
                                     DriverCall call) {
  const CUresult rc = allocate_keyed(arrays_, api, bytes, call,
                                     [array] { return array != nullptr ? key_of(*array) : 0; });
  if (rc != CUDA_SUCCESS) return rc;
  const uint64_t key = array != nullptr ? key_of(*array) : 0;
  TenantDevice device;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  if (!devices_.current(&device) || !array_requirements(calls_, *array, device.ordinal, &req) ||
      req.size == 0) {
    return rc;
  }
  auto charge = arrays_.find(key);
  if (!charge) return rc;
  if (req.size < charge->bytes) {
    release(static_cast<int>(charge->device), charge->bytes - req.size);
  } else if (req.size > charge->bytes) {
    ledger_.force_charge(charge->device, req.size - charge->bytes);
  }
  arrays_.insert(key, {charge->device, static_cast<uint64_t>(req.size), 0});
  return rc;
}

CUresult MemoryPolicy::create_array(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc,
                                    DriverCall call) {
  const uint64_t bytes =
      desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels) : 0;
  return created_array("cuArrayCreate", array, bytes, call);
}

CUresult MemoryPolicy::create_array(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                    DriverCall call) {
  const uint64_t bytes =
      desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels)
           : 0;
  return created_array("cuArray3DCreate", array, bytes, call);
}

CUresult MemoryPolicy::create_mipmapped_array(CUmipmappedArray* array,
                                              const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned levels,
                                              DriverCall call) {
  const uint64_t bytes = desc ? mipmap_bytes(*desc, levels) : 0;
  return created_array("cuMipmappedArrayCreate", array, bytes, call);
}

// A stream-ordered allocation on a capturing stream allocates nothing: it adds a memory
// node to the graph being captured, charged when a launch of the graph backs it
// (graph_memory.h). The same holds for a free captured into a graph: the charge of the
// allocation it frees stays until the free really happens (a later free of the same
// address, or its reuse, settles the row), so the books never run short.
bool MemoryPolicy::captured(CUstream stream, bool per_thread) const {
  if (!captures_.any_open()) return false;
  return captures_.surely_capturing(explicit_stream(stream, per_thread));
}

CUresult MemoryPolicy::allocate_async(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                      CUstream stream, bool per_thread, DriverCall call) {
  if (captured(stream, per_thread)) return call();
  TenantDevice device;
  if (!devices_.of_stream(stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;  // never uncharged
  if (pool == nullptr) {
    auto current_pool = calls_.cuDeviceGetMemPool;
    if (current_pool == nullptr || current_pool(&pool, device.ordinal) != CUDA_SUCCESS)
      pool = nullptr;
  }
  const MemoryPools::Change claimed = pools_.claim(pool, device.index, size);
  if (claimed.bytes > 0) {
    const CUresult rc =
        reserve(TenantDevice{device.ordinal, claimed.index}, claimed.bytes, "cuMemAllocAsync");
    if (rc != CUDA_SUCCESS) {
      pools_.unclaim(pool, size, claimed.bytes);
      return rc;
    }
  }
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    release(pools_.unclaim(pool, size, claimed.bytes));
    return rc;
  }
  remember(async_memory_, *dptr,
           {static_cast<uint32_t>(device.index), size, reinterpret_cast<uintptr_t>(pool)});
  if (claimed.bytes > 0 && pool != nullptr) {
    const MemoryPools::Change rounding = pools_.settle(pool);
    if (!charge_existing(rounding.index, rounding.bytes)) {
      FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8, "memory pool rounding put %llu bytes beyond the grant",
                         static_cast<unsigned long long>(rounding.bytes));
    }
  }
  return rc;
}

CUresult MemoryPolicy::free_async(CUdeviceptr ptr, CUstream stream, bool per_thread,
                                  DriverCall call) {
  if (captured(stream, per_thread)) return call();
  return free_any(ptr, call);
}

CUresult MemoryPolicy::trim_pool(CUmemoryPool pool, DriverCall call) {
  const CUresult rc = call();
  if (rc == CUDA_SUCCESS) release(pools_.resync(pool));
  return rc;
}

CUresult MemoryPolicy::destroy_pool(CUmemoryPool pool, DriverCall call) {
  const CUresult rc = call();
  if (rc == CUDA_SUCCESS)
    release(pools_.destroyed(pool));  // outstanding allocations keep their rows
  return rc;
}

}  // namespace fracgpu
