// Bodies of the stream-ordered allocation hooks (cuMemAllocAsync, memory pools). For a
// tenant that may swap, an allocation from the device's default or current pool on a stream
// that is not capturing is served by the swappable arena (core/async_arena.h), so that the
// broker can move it to host; its frees, and a trim of that pool, go to the arena too.
// Everything else is one call into MemoryPolicy (core/memory_policy.h), which finds the pool
// an allocation comes from, charges what its cache cannot cover (core/memory_pools.h) and
// keeps the per-pointer record that a later free — stream-ordered or not — settles; during
// capture the driver always gets the allocation (graph memory nodes). Without a tenant each
// body is a plain forward. The arena is created at the first allocation it serves and never
// destroyed; a forked child forgets it (like SwapEngine).
// Cost: a tenant with swap "never" pays one relaxed load per allocation (its quota's swap
// policy; one per device of a multi-GPU tenant) and one load per free or trim (no arena).
#include <pthread.h>

#include <mutex>

#include "core/async_arena.h"
#include "core/async_arena_port.h"
#include "hook_bodies.h"

namespace fracgpu::shim {
namespace {

struct ArenaState {
  explicit ArenaState(TenantPolicies& t)
      : port(t.swap, t.memory.driver(), t.captures), arena(port) {}
  SwapArenaPort port;
  AsyncArena arena;
};

std::once_flag g_arena_once;
std::atomic<ArenaState*> g_arena{nullptr};
std::atomic<CUmemoryPool> g_default_pools[kMaxDevices] = {};  // by tenant device; never change

void arena_after_fork_in_child() {
  if (ArenaState* s = g_arena.load(std::memory_order_acquire)) s->arena.after_fork_in_child();
}

const TenantQuota* quota_of(TenantPolicies* t) {
  return t->memory.tenant().quota();
}

bool swap_allowed(const TenantQuota* q, int index) {
  return q != nullptr && index >= 0 && index < static_cast<int>(kMaxDevices) &&
         q->devices[index].swap_policy.load(std::memory_order_relaxed) == kSwapAllow;
}

// The one check a tenant that never swaps pays.
bool any_swap_allowed(TenantPolicies* t) {
  const TenantQuota* q = quota_of(t);
  if (q == nullptr) return false;
  for (uint32_t d = 0; d < q->device_count && d < kMaxDevices; ++d)
    if (q->devices[d].swap_policy.load(std::memory_order_relaxed) == kSwapAllow) return true;
  return false;
}

}  // namespace

// cuMemFree of arena memory (CUDA allows it on stream-ordered memory: it synchronises):
// nullopt when `ptr` is not the arena's. For MemoryPolicy::free_any, ahead of the engine.
std::optional<CUresult> arena_free_sync(CUdeviceptr ptr) noexcept;

namespace {

AsyncArena& arena(TenantPolicies* t) {
  std::call_once(g_arena_once, [t] {
    g_arena.store(new ArenaState(*t), std::memory_order_release);
    t->memory.attach_free_route(&arena_free_sync);  // cuMemFree of arena memory reaches it
    pthread_atfork(nullptr, nullptr, &arena_after_fork_in_child);
  });
  return g_arena.load(std::memory_order_relaxed)->arena;
}

AsyncArena* existing_arena() {
  ArenaState* s = g_arena.load(std::memory_order_acquire);
  return s != nullptr ? &s->arena : nullptr;
}

// Is `pool` the one cuMemAllocAsync would use on `device` (its default or current pool)?
bool device_pool(TenantPolicies* t, CUmemoryPool pool, const TenantDevice& device) {
  const DriverCalls& calls = t->memory.driver();
  std::atomic<CUmemoryPool>& cached = g_default_pools[device.index];
  CUmemoryPool found = cached.load(std::memory_order_relaxed);
  if (found == nullptr && calls.cuDeviceGetDefaultMemPool != nullptr &&
      calls.cuDeviceGetDefaultMemPool(&found, device.ordinal) == CUDA_SUCCESS)
    cached.store(found, std::memory_order_relaxed);
  if (pool == found) return true;
  CUmemoryPool current = nullptr;
  return calls.cuDeviceGetMemPool != nullptr &&
         calls.cuDeviceGetMemPool(&current, device.ordinal) == CUDA_SUCCESS && pool == current;
}

std::optional<CUresult> arena_allocate(TenantPolicies* t, CUdeviceptr* dptr, size_t size,
                                       CUmemoryPool pool, CUstream stream, bool per_thread) {
  const CUstream named = explicit_stream(stream, per_thread);
  // Captured: a graph memory node, the driver's (in doubt too).
  if (t->captures.any_open() && t->captures.capturing(named)) return std::nullopt;
  TenantDevice device;
  if (!t->devices.of_stream(stream, &device) || !swap_allowed(quota_of(t), device.index))
    return std::nullopt;
  if (pool != nullptr && !device_pool(t, pool, device)) return std::nullopt;
  return arena(t).allocate(device, dptr, size, stream_key(stream, per_thread), named);
}

CUresult allocate_async(TenantPolicies* t, CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                        CUstream stream, bool per_thread, DriverCall call) {
  if (any_swap_allowed(t)) {
    if (auto rc = arena_allocate(t, dptr, size, pool, stream, per_thread)) return *rc;
  }
  return t->memory.allocate_async(dptr, size, pool, stream, per_thread, call);
}

CUresult free_async(TenantPolicies* t, CUdeviceptr ptr, CUstream stream, bool per_thread,
                    DriverCall call) {
  if (AsyncArena* a = existing_arena()) {
    const CUstream named = explicit_stream(stream, per_thread);
    const bool captured = t->captures.any_open() && t->captures.surely_capturing(named);
    const auto rc = captured ? a->free_captured(ptr)
                             : a->free_async(ptr, stream_key(stream, per_thread), named);
    if (rc) return *rc;
  }
  return t->memory.free_async(ptr, stream, per_thread, call);
}

// A trim of a device's default or current pool also returns the arena's idle chunks there.
void trim_arena(TenantPolicies* t, CUmemoryPool pool, size_t keep) {
  AsyncArena* a = existing_arena();
  const DriverCalls& calls = t->memory.driver();
  if (a == nullptr || pool == nullptr || calls.cuDeviceGetCount == nullptr) return;
  int count = 0;
  if (calls.cuDeviceGetCount(&count) != CUDA_SUCCESS) return;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    const TenantDevice device = t->devices.device(static_cast<CUdevice>(ordinal));
    if (device.index < 0 || device.index >= static_cast<int>(kMaxDevices)) continue;
    if (device_pool(t, pool, device)) a->trim(device.index, keep);
  }
}

}  // namespace

std::optional<CUresult> arena_free_sync(CUdeviceptr ptr) noexcept {
  AsyncArena* a = existing_arena();
  return a != nullptr ? a->free_sync(ptr) : std::nullopt;
}

CUresult HookBody<HookId::cuMemAllocAsync>::call(PFN_cuMemAllocAsync_v11020 real, CUdeviceptr* dptr,
                                                 size_t size, CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? allocate_async(t, dptr, size, nullptr, stream, false,
                            [&] { return real(dptr, size, stream); })
           : real(dptr, size, stream);
}

CUresult HookBody<HookId::cuMemAllocAsync_ptsz>::call(PFN_cuMemAllocAsync_v11020_ptsz real,
                                                      CUdeviceptr* dptr, size_t size,
                                                      CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? allocate_async(t, dptr, size, nullptr, stream, true,
                            [&] { return real(dptr, size, stream); })
           : real(dptr, size, stream);
}

CUresult HookBody<HookId::cuMemAllocFromPoolAsync>::call(PFN_cuMemAllocFromPoolAsync_v11020 real,
                                                         CUdeviceptr* dptr, size_t size,
                                                         CUmemoryPool pool,
                                                         CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  if (t == nullptr) return real(dptr, size, pool, stream);
  if (pool == nullptr) return real(dptr, size, pool, stream);  // the driver's own refusal
  return allocate_async(t, dptr, size, pool, stream, false,
                        [&] { return real(dptr, size, pool, stream); });
}

CUresult HookBody<HookId::cuMemAllocFromPoolAsync_ptsz>::call(
    PFN_cuMemAllocFromPoolAsync_v11020_ptsz real, CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
    CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  if (t == nullptr || pool == nullptr) return real(dptr, size, pool, stream);
  return allocate_async(t, dptr, size, pool, stream, true,
                        [&] { return real(dptr, size, pool, stream); });
}

CUresult HookBody<HookId::cuMemFreeAsync>::call(PFN_cuMemFreeAsync_v11020 real, CUdeviceptr ptr,
                                                CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? free_async(t, ptr, stream, false, [&] { return real(ptr, stream); })
           : real(ptr, stream);
}

CUresult HookBody<HookId::cuMemFreeAsync_ptsz>::call(PFN_cuMemFreeAsync_v11020_ptsz real,
                                                     CUdeviceptr ptr, CUstream stream) noexcept {
  TenantPolicies* t = tenant();
  return t ? free_async(t, ptr, stream, true, [&] { return real(ptr, stream); })
           : real(ptr, stream);
}

CUresult HookBody<HookId::cuMemPoolTrimTo>::call(PFN_cuMemPoolTrimTo_v11020 real, CUmemoryPool pool,
                                                 size_t keep) noexcept {
  TenantPolicies* t = tenant();
  if (t == nullptr) return real(pool, keep);
  trim_arena(t, pool, keep);
  return t->memory.trim_pool(pool, [&] { return real(pool, keep); });
}

CUresult HookBody<HookId::cuMemPoolDestroy>::call(PFN_cuMemPoolDestroy_v11020 real,
                                                  CUmemoryPool pool) noexcept {
  TenantPolicies* t = tenant();
  return t ? t->memory.destroy_pool(pool, [&] { return real(pool); }) : real(pool);
}

}  // namespace fracgpu::shim
