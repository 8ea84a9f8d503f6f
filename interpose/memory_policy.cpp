// Start-up of the memory quota and the reservation slow path (see memory_policy.h).
#include "memory_policy.h"

#include <pthread.h>
#include <unistd.h>

#include "core/shim_log.h"
#include "memory_pools.h"

namespace fracgpu::shim {
namespace {

constexpr int kConnectTimeoutMs = 10000;

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

}  // namespace

bool MemoryPolicy::start(const std::string& socket_path, bool socket_explicit, void* driver_handle,
                         std::string* error) {
  if (!socket_explicit && ::access(socket_path.c_str(), F_OK) != 0) return true;  // no tenant here
  auto* policy = new MemoryPolicy();
  if (!policy->session_.attach(socket_path, kConnectTimeoutMs, error)) {
    delete policy;
    return false;
  }
  resolve_driver_calls(driver_handle, &policy->calls_);
  policy->resolver_.init(&policy->calls_, policy->session_.quota());
  instance_ = policy;
  pthread_atfork(nullptr, nullptr, [] { instance_->session_.forget_parent_after_fork(); });
  FRACGPU_LOG(LogLevel::kInfo, "registered with tenant '%s' (slot %u)", policy->session_.tenant().c_str(),
              policy->session_.slot());
  return true;
}

bool MemoryPolicy::current_device(TenantDevice* out) {
  if (!resolver_.current_device(&out->ordinal)) return false;
  out->index = resolver_.tenant_device(out->ordinal);
  return true;
}

TenantDevice MemoryPolicy::device(CUdevice ordinal) { return {ordinal, resolver_.tenant_device(ordinal)}; }

CUresult MemoryPolicy::reserve(const TenantDevice& device, uint64_t bytes, const char* api) {
  if (device.index == kNoTenantDevice) {
    FRACGPU_LOG_CAPPED(LogLevel::kError, 16, "%s refused: GPU %d is not assigned to tenant '%s'", api,
                       device.ordinal, session_.tenant().c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint32_t index = static_cast<uint32_t>(device.index);
  if (session_.needs_registration()) {
    std::string error;
    if (!session_.register_forked_child(&error)) {
      FRACGPU_LOG_CAPPED(LogLevel::kError, 4, "%s refused: cannot register this forked process (%s)", api,
                         error.c_str());
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  MemoryLedger& ledger = session_.ledger();
  ReserveOutcome outcome = ledger.try_reserve(index, bytes);
  std::string burst_error;
  for (int attempt = 0; attempt < 3 && outcome == ReserveOutcome::kOverGrant; ++attempt) {
    if (!session_.request_burst(index, bytes, &burst_error)) break;
    outcome = ledger.try_reserve(index, bytes);
  }
  if (outcome != ReserveOutcome::kReserved && MemoryPools::instance().reclaim_cached(*this, index) > 0) {
    outcome = ledger.try_reserve(index, bytes);  // pools held cached memory; try once more
  }
  if (outcome == ReserveOutcome::kReserved) return CUDA_SUCCESS;
  ledger.count_oom(index);
  if (outcome == ReserveOutcome::kOverLimit) {
    FRACGPU_LOG_CAPPED(LogLevel::kError, 16,
                       "%s of %llu bytes refused: tenant '%s' is at its memory cap of %s on GPU %d (%s in use)",
                       api, static_cast<unsigned long long>(bytes), session_.tenant().c_str(),
                       gib(ledger.limit(index)).c_str(), device.ordinal, gib(ledger.used(index)).c_str());
  } else {
    FRACGPU_LOG_CAPPED(LogLevel::kError, 16,
                       "%s of %llu bytes refused: tenant '%s' is above its guaranteed %s on GPU %d and the "
                       "broker granted no burst (%s)",
                       api, static_cast<unsigned long long>(bytes), session_.tenant().c_str(),
                       gib(ledger.grant(index)).c_str(), device.ordinal, burst_error.c_str());
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void MemoryPolicy::release(int index, uint64_t bytes) {
  if (index != kNoTenantDevice && bytes > 0) session_.ledger().release(static_cast<uint32_t>(index), bytes);
}

void MemoryPolicy::remember(AllocationTable MemoryPolicy::*table, uint64_t key, const ChargedAllocation& charge) {
  if (auto stale = (this->*table).insert(key, charge)) release(static_cast<int>(stale->device), stale->bytes);
}

void MemoryPolicy::clamp_memory_info(const TenantDevice& device, size_t* free_bytes, size_t* total_bytes) {
  if (device.index == kNoTenantDevice) {  // a device the tenant may not use looks full
    if (free_bytes) *free_bytes = 0;
    return;
  }
  const uint32_t index = static_cast<uint32_t>(device.index);
  MemoryPools::instance().reclaim_cached(*this, index);
  const uint64_t limit = session_.ledger().limit(index);
  const uint64_t used = session_.ledger().used(index);
  const uint64_t headroom = used < limit ? limit - used : 0;
  if (total_bytes) *total_bytes = static_cast<size_t>(limit);
  if (free_bytes) *free_bytes = static_cast<size_t>(std::min<uint64_t>(*free_bytes, headroom));
}

}  // namespace fracgpu::shim
