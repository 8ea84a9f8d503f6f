// The swap thread's care of the swap reserve (SwapEngine, see swap_engine.h and
// core/host_reserve.h): how much this process may hold, growing and trimming it, and what
// the broker is told it holds (TenantLedger.host_reserved, include/fracgpu/tenant_segment.h
// "The swap reserve").
//
// Cost: per look of the swap thread (every 200 ms, or at once after a growth step), one
// pass over the tenant's device quotas, its ledger's host_reserved words and this
// process's backed allocations; nothing on the application's calls. Growing pins host
// memory on the staging workers (a few GB/s: 1 GiB takes a fraction of a second), at most
// kGrowStep per look, so that a demand waits at most one step for the swap thread.
#include <algorithm>

#include "core/context_scope.h"
#include "core/shim_log.h"
#include "core/swap_engine.h"
#include "fracgpu/ledger_protocol.h"

namespace fracgpu {
namespace {

constexpr uint64_t kGrowStep = 1ull << 30;
constexpr uint64_t kSlab = HostReserve::kSlabBytes;

}  // namespace

// min(the tenant's reserve on the GPUs this process uses less what its other live
// processes hold, this process's resident swappable bytes); 0 for swap never or without
// the ledger's word; nullopt while a demand is open: the reserve stays as it is (the
// swap-out that could not finish yet, a capture being open, will want it).
std::optional<uint64_t> SwapEngine::reserve_allowed() noexcept {
  TenantLink& tenant = memory_.tenant();
  std::atomic<uint64_t>* mine = tenant.host_reserved_word();
  if (mine == nullptr) return 0;
  const TenantQuota* quota = tenant.quota();
  const uint32_t used = devices_used_.load(std::memory_order_relaxed);
  uint64_t target = 0;
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if ((used & (1u << d)) == 0) continue;
    const DeviceQuota& q = quota->devices[d];
    if (q.resident_target.load(std::memory_order_acquire) != kNoResidentTarget) return std::nullopt;
    if (q.swap_policy.load(std::memory_order_relaxed) != kSwapAllow) continue;
    target += q.host_reserve.load(std::memory_order_relaxed);
  }
  if (target == 0) return 0;
  const uint64_t others = ledger_protocol::live_host_reserved(*tenant.ledger_map(), tenant.slot());
  const uint64_t share = target > others ? target - others : 0;
  uint64_t resident = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [va, b] : backed_)
      if (b.handle != 0 && !b.pinned) resident += b.size;
  }
  return std::min(share, resident);
}

void SwapEngine::publish_reserve_locked(uint64_t extra) noexcept {
  std::atomic<uint64_t>* word = memory_.tenant().host_reserved_word();
  if (word == nullptr) return;
  uint64_t held = staging_.reserve_free_bytes() + extra;
  for (const auto& [host, size] : retired_hosts_) held += staging_.reserve_bytes_of(host);
  word->store(held, std::memory_order_release);
}

bool SwapEngine::keep_reserve() noexcept {
  if (memory_.tenant().host_reserved_word() == nullptr) return false;
  const std::optional<uint64_t> wanted = reserve_allowed();
  const uint64_t allowed = wanted.value_or(0);
  const uint64_t free = staging_.reserve_free_bytes();
  bool grew = false;
  if (!wanted) {
    // a demand is open: neither grown nor trimmed
  } else if (allowed >= free + kSlab) {
    // Whole slabs, never above what is allowed; announced before they are pinned.
    const uint64_t step = std::min(kGrowStep, (allowed - free) / kSlab * kSlab);
    CUcontext context = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [va, b] : backed_)
        if (b.context != nullptr) {
          context = b.context;
          break;
        }
      if (context != nullptr) publish_reserve_locked(step);
    }
    if (context != nullptr) {
      // This thread pins what no worker has claimed yet: the context must be current here too.
      ContextScope scope(calls_, context);
      grew = staging_.grow_reserve(context, step) == step;
    }
  } else if (free > allowed + kSlab / 2) {
    staging_.shrink_reserve(allowed);  // whole free slabs only: pieces in use stay
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    publish_reserve_locked();
  }
  const uint64_t capacity = staging_.reserve_capacity();
  if (!grew && capacity != reserve_logged_) {
    FRACGPU_LOG(LogLevel::kInfo,
                "swap reserve of tenant '%s': %.1f MiB of host memory pinned ahead (%.1f MiB "
                "free, %.1f MiB allowed)",
                memory_.tenant().tenant().c_str(), static_cast<double>(capacity) / (1 << 20),
                static_cast<double>(staging_.reserve_free_bytes()) / (1 << 20),
                static_cast<double>(allowed) / (1 << 20));
    reserve_logged_ = capacity;
  }
  return grew;
}

}  // namespace fracgpu
