// The application's own VMM memory made swappable (see app_vmm.h): the handle table, the
// hook bodies' bookkeeping, and SwapEngine's part for application-owned mappings (declared
// in swap_engine.h, kept here beside the bookkeeping they serve).
#include "core/app_vmm.h"

#include <time.h>

#include <algorithm>

#include "core/shim_log.h"
#include "fracgpu/monotonic_clock.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

// --- AppHandleTable ---

AppHandleTable::Handle AppHandleTable::add(Handle real, Entry entry) {
  entry.real = real;
  const Handle app = entries_.count(real) != 0 ? next_minted_++ : real;
  entries_[app] = std::move(entry);
  return app;
}

AppHandleTable::Entry* AppHandleTable::find(Handle app) {
  auto it = entries_.find(app);
  return it == entries_.end() ? nullptr : &it->second;
}

void AppHandleTable::erase(Handle app) {
  auto it = entries_.find(app);
  if (it == entries_.end()) return;
  if (!it->second.created) aliases_.erase(it->second.real);
  entries_.erase(it);
}

AppHandleTable::Handle AppHandleTable::value_for(Handle real) {
  if (auto known = aliases_.find(real); known != aliases_.end()) {
    ++entries_.at(known->second).references;  // the driver counts this reference too
    return known->second;
  }
  auto it = entries_.find(real);
  if (it == entries_.end() || it->second.real == real) return real;
  Entry alias;  // not created here: never swaps, only translated
  alias.references = 1;
  const Handle app = add(real, alias);
  aliases_[real] = app;
  return app;
}

std::optional<AppHandleTable::Handle> AppHandleTable::mapped_at(CUdeviceptr ptr) const {
  auto it = mappings_.upper_bound(ptr);
  if (it == mappings_.begin()) return std::nullopt;
  --it;
  if (ptr - it->first >= it->second.first) return std::nullopt;
  return it->second.second;
}

void AppHandleTable::mapped(Handle app, CUdeviceptr va, uint64_t size, uint64_t offset) {
  Entry* e = find(app);
  if (e == nullptr) return;
  mappings_[va] = {size, app};
  if (++e->mappings == 1) {
    e->va = va;
    e->whole = offset == 0 && size == e->size;
    e->access.clear();
  } else {
    e->va = 0;
    e->whole = false;
  }
}

void AppHandleTable::unmapped(Handle app, CUdeviceptr va) {
  mappings_.erase(va);
  Entry* e = find(app);
  if (e == nullptr) return;
  --e->mappings;
  if (e->va == va) {
    e->va = 0;
    e->whole = false;
    e->access.clear();
  }
}

std::vector<std::pair<CUdeviceptr, AppHandleTable::Handle>> AppHandleTable::mappings_in(
    CUdeviceptr ptr, uint64_t size) const {
  std::vector<std::pair<CUdeviceptr, Handle>> out;
  for (auto it = mappings_.lower_bound(ptr); it != mappings_.end() && it->first - ptr < size; ++it)
    out.push_back({it->first, it->second.second});
  return out;
}

bool AppHandleTable::swappable(const Entry& e) noexcept {
  return e.created && !e.exported && e.mappings == 1 && e.whole && !e.access.empty() &&
         e.real != 0 && e.device.index >= 0 && e.size % kSwapPage == 0;
}

void AppHandleTable::clear() {
  entries_.clear();
  aliases_.clear();
  mappings_.clear();
}

// --- AppVmm ---

bool AppVmm::swap_allowed(const TenantDevice& device) const noexcept {
  if (device.index < 0 || device.index >= static_cast<int>(kMaxDevices)) return false;
  const TenantQuota* quota = memory_.tenant().quota();
  return quota != nullptr &&
         quota->devices[device.index].swap_policy.load(std::memory_order_relaxed) == kSwapAllow &&
         calls_.cuMemcpyDtoH != nullptr && calls_.cuMemcpyHtoD != nullptr &&
         calls_.cuMemSetAccess != nullptr && calls_.cuMemHostAlloc != nullptr;
}

CUresult AppVmm::create(CUmemGenericAllocationHandle* handle, size_t size,
                        const CUmemAllocationProp* prop, unsigned long long flags,
                        PFN_cuMemCreate_v10020 real) {
  auto call = [&] { return real(handle, size, prop, flags); };
  TenantDevice device;
  const bool on_device = prop != nullptr && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  if (on_device) device = memory_.devices().device(prop->location.id);
  const bool track = on_device && swap_allowed(device) && size % kSwapPage == 0;
  if (!track && !active()) return vmm_.create(handle, size, prop, call);
  return vmm_.create(handle, size, prop, [&] {
    const CUresult rc = call();
    if (rc != CUDA_SUCCESS) return rc;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!track) {
      *handle = table_.value_for(*handle);
      return rc;
    }
    AppHandleTable::Entry e;
    e.size = size;
    e.prop = *prop;
    e.device = device;
    e.created = true;
    *handle = table_.add(*handle, std::move(e));
    active_.store(true, std::memory_order_relaxed);
    return rc;
  });
}

std::optional<CUmemGenericAllocationHandle> AppVmm::real_of(CUmemGenericAllocationHandle app) {
  AppHandleTable::Entry* e = table_.find(app);
  if (e == nullptr) return std::nullopt;
  if (e->adopted) return swap_.app_real(e->adopted, false).value_or(0);
  return e->real;
}

void AppVmm::pin(CUmemGenericAllocationHandle app) {
  AppHandleTable::Entry* e = table_.find(app);
  if (e == nullptr) return;
  e->exported = true;
  if (e->adopted) {
    if (auto r = swap_.app_real(e->adopted, true)) e->real = *r;
  } else if (e->real == 0 && e->host != nullptr &&
             swap_.restore_app_handle(e->device, e->size, e->prop, e->host, &e->real) ==
                 CUDA_SUCCESS) {
    e->host = nullptr;
    vmm_.set_on_host(app, false);
  }
}

CUresult AppVmm::map(CUdeviceptr ptr, size_t size, size_t offset,
                     CUmemGenericAllocationHandle handle, unsigned long long flags,
                     PFN_cuMemMap_v10020 real) {
  if (!active())
    return vmm_.map(ptr, handle, [&] { return real(ptr, size, offset, handle, flags); });
  return vmm_.map(ptr, handle, [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    AppHandleTable::Entry* e = table_.find(handle);
    if (e == nullptr) return real(ptr, size, offset, handle, flags);
    if (e->adopted) pin(handle);               // a second mapping: it stays resident from now on
    if (e->real == 0 && e->host != nullptr) {  // unmapped while on host: back first
      const CUresult rc = swap_.restore_app_handle(e->device, e->size, e->prop, e->host, &e->real);
      if (rc != CUDA_SUCCESS) return rc;
      e->host = nullptr;
      vmm_.set_on_host(handle, false);
    }
    if (e->real == 0) return CUDA_ERROR_INVALID_HANDLE;
    const CUresult rc = real(ptr, size, offset, e->real, flags);
    if (rc == CUDA_SUCCESS) table_.mapped(handle, ptr, size, offset);
    return rc;
  });
}

void AppVmm::adopt_if_swappable(CUmemGenericAllocationHandle app) {
  AppHandleTable::Entry* e = table_.find(app);
  if (e == nullptr || !AppHandleTable::swappable(*e)) return;
  SwapEngine::AppMapping mapping;
  mapping.app = app;
  mapping.prop = e->prop;
  mapping.access = e->access;
  mapping.released = e->references <= 0;
  swap_.adopt_app_mapping(e->va, e->device, e->size, e->real, std::move(mapping));
  e->adopted = e->va;
}

CUresult AppVmm::set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count,
                            PFN_cuMemSetAccess_v10020 real) {
  const CUresult rc = real(ptr, size, desc, count);
  if (rc != CUDA_SUCCESS || !active() || desc == nullptr) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [va, app] : table_.mappings_in(ptr, size)) {
    AppHandleTable::Entry* e = table_.find(app);
    if (e == nullptr || e->va != va) continue;
    // Later calls add devices or change their rights: what a swap-in must set again.
    for (size_t i = 0; i < count; ++i) {
      auto same = std::find_if(e->access.begin(), e->access.end(), [&](const CUmemAccessDesc& a) {
        return a.location.type == desc[i].location.type && a.location.id == desc[i].location.id;
      });
      if (same != e->access.end()) {
        same->flags = desc[i].flags;
      } else {
        e->access.push_back(desc[i]);
      }
    }
    adopt_if_swappable(app);
  }
  return rc;
}

void AppVmm::forget_if_done(CUmemGenericAllocationHandle app) {
  AppHandleTable::Entry* e = table_.find(app);
  if (e == nullptr || e->references > 0 || e->mappings > 0) return;
  if (e->host != nullptr) swap_.retire_host(e->host, e->size);
  table_.erase(app);
}

CUresult AppVmm::unmap(CUdeviceptr ptr, size_t size, PFN_cuMemUnmap_v10020 real) {
  if (!active()) return vmm_.unmap(ptr, size, [&] { return real(ptr, size); });
  return vmm_.unmap(ptr, size, [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto inside = table_.mappings_in(ptr, size);
    std::vector<std::pair<CUdeviceptr, uint64_t>> on_host;  // nothing mapped there really
    for (const auto& [va, app] : inside) {
      AppHandleTable::Entry* e = table_.find(app);
      if (e == nullptr || e->adopted != va) continue;
      e->adopted = 0;
      const std::optional<SwapEngine::AppLeft> left = swap_.leave_app_mapping(va);
      if (!left) continue;
      e->real = left->real;
      e->exported = e->exported || left->pinned;
      if (left->real == 0) {
        e->host = left->host;
        on_host.push_back({va, e->size});
        vmm_.set_on_host(app, true);
      }
    }
    // The driver unmaps what it has mapped: the request less the ranges on host.
    CUresult rc = CUDA_SUCCESS;
    CUdeviceptr cursor = ptr;
    for (const auto& [va, bytes] : on_host) {
      if (va > cursor && rc == CUDA_SUCCESS) rc = real(cursor, va - cursor);
      cursor = va + bytes;
    }
    if (cursor < ptr + size && rc == CUDA_SUCCESS) rc = real(cursor, ptr + size - cursor);
    if (rc != CUDA_SUCCESS) return rc;
    for (const auto& [va, app] : inside) {
      table_.unmapped(app, va);
      forget_if_done(app);
    }
    return rc;
  });
}

CUresult AppVmm::release(CUmemGenericAllocationHandle handle, PFN_cuMemRelease_v10020 real) {
  if (!active()) return vmm_.release(handle, [&] { return real(handle); });
  return vmm_.release(handle, [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    AppHandleTable::Entry* e = table_.find(handle);
    if (e == nullptr) return real(handle);
    if (e->references <= 0) return CUDA_ERROR_INVALID_VALUE;
    // The driver holds one reference for all of the application's (retains are ours);
    // an alias's references are the driver's own.
    CUresult rc = CUDA_SUCCESS;
    if (!e->created) {
      rc = real(e->real);
    } else if (e->references == 1) {
      if (e->adopted) {
        rc = swap_.release_app_reference(e->adopted);
      } else if (e->real != 0) {
        rc = real(e->real);
      }  // else on host and unmapped: nothing real to release
    }
    if (rc != CUDA_SUCCESS) return rc;
    --e->references;
    forget_if_done(handle);
    return rc;
  });
}

CUresult AppVmm::retain(CUmemGenericAllocationHandle* handle, void* addr,
                        PFN_cuMemRetainAllocationHandle_v11000 real) {
  if (!active() || handle == nullptr) return real(handle, addr);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<CUmemGenericAllocationHandle> app =
      table_.mapped_at(reinterpret_cast<CUdeviceptr>(addr));
  AppHandleTable::Entry* e = app ? table_.find(*app) : nullptr;
  if (e == nullptr) {
    const CUresult rc = real(handle, addr);
    if (rc == CUDA_SUCCESS) *handle = table_.value_for(*handle);
    return rc;
  }
  if (e->references == 0) {  // released while mapped: the driver's reference comes back
    if (e->adopted) {
      if (!swap_.app_real(e->adopted, true, true)) return CUDA_ERROR_OUT_OF_MEMORY;
      e->exported = true;  // kept resident: simpler than re-counting a moved reference
    }
    CUmemGenericAllocationHandle driver = 0;
    if (CUresult rc = real(&driver, addr); rc != CUDA_SUCCESS) return rc;
  }
  ++e->references;
  *handle = *app;
  return CUDA_SUCCESS;
}

CUresult AppVmm::properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle,
                            PFN_cuMemGetAllocationPropertiesFromHandle_v10020 real) {
  if (!active() || prop == nullptr) return real(prop, handle);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<CUmemGenericAllocationHandle> r = real_of(handle);
  if (!r) return real(prop, handle);
  if (*r != 0) return real(prop, *r);
  *prop = table_.find(handle)->prop;  // on host: what the application asked for
  return CUDA_SUCCESS;
}

CUresult AppVmm::import(CUmemGenericAllocationHandle* handle, void* os_handle,
                        CUmemAllocationHandleType type,
                        PFN_cuMemImportFromShareableHandle_v10020 real) {
  const CUresult rc = real(handle, os_handle, type);
  if (rc != CUDA_SUCCESS || !active() || handle == nullptr) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  *handle = table_.value_for(*handle);  // never an entry of its own: imported memory stays
  return rc;
}

CUmemGenericAllocationHandle AppVmm::exported(CUmemGenericAllocationHandle handle) noexcept {
  if (active()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (AppHandleTable::Entry* e = table_.find(handle)) {
      pin(handle);
      return e->real != 0 ? e->real : handle;
    }
  }
  swap_.pin_handle(handle);  // maybe one of the engine's own (cuMemRetainAllocationHandle)
  return handle;
}

std::size_t AppVmm::handles() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return table_.size();
}

void AppVmm::after_fork_in_child() noexcept {
  new (&mutex_) std::mutex();
  table_.clear();
  active_.store(false, std::memory_order_relaxed);
}

// --- SwapEngine: the application's own mappings ---

namespace {

void pause_ns(int64_t ns) {
  timespec t{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  nanosleep(&t, nullptr);
}

}  // namespace

void SwapEngine::adopt_app_mapping(CUdeviceptr va, const TenantDevice& device, uint64_t size,
                                   CUmemGenericAllocationHandle real, AppMapping mapping) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = backed_.find(va);
    if (it != backed_.end()) {
      if (it->second.app) it->second.app->access = std::move(mapping.access);
      return;
    }
    Backed b;
    b.index = device.index;
    b.ordinal = device.ordinal;
    b.size = size;
    b.handle = real;
    if (fence_ops_.ctx_get_current != nullptr) fence_ops_.ctx_get_current(&b.context);
    b.app = std::make_shared<AppMapping>(std::move(mapping));
    backed_[va] = std::move(b);
  }
  devices_used_.fetch_or(1u << device.index, std::memory_order_relaxed);
  ProcessSlot& slot = memory_.tenant().ledger_map()->processes[memory_.tenant().slot()];
  slot.last_active_ns.store(static_cast<uint64_t>(monotonic_ns()), std::memory_order_relaxed);
  gate_.arm();
  if (!thread_started_.exchange(true)) start_thread();
}

std::optional<SwapEngine::AppLeft> SwapEngine::leave_app_mapping(CUdeviceptr va) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = backed_.find(va);
  if (it == backed_.end() || !it->second.app) return std::nullopt;
  const Backed b = it->second;
  backed_.erase(it);
  if (b.pinned) pinned_bytes_.fetch_sub(b.size, std::memory_order_relaxed);
  // On host: the ledger keeps counting the copy (VmmMemory settles it at the release).
  if (b.handle == 0) swapped_bytes_.fetch_sub(b.size, std::memory_order_relaxed);
  return AppLeft{b.handle, b.host, b.pinned};
}

std::optional<CUmemGenericAllocationHandle> SwapEngine::app_real(CUdeviceptr va, bool pin_it,
                                                                 bool referenced) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = backed_.find(va);
  if (it == backed_.end() || !it->second.app) return std::nullopt;
  Backed& b = it->second;
  if (pin_it) {
    if (b.handle == 0) {
      if (!bring_back(va, b)) return std::nullopt;
      if (swapped_bytes_.load(std::memory_order_relaxed) == 0) gate_.open();
    }
    pin(b);
  }
  if (referenced) b.app->released = false;
  return b.handle;
}

CUresult SwapEngine::release_app_reference(CUdeviceptr va) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = backed_.find(va);
  if (it == backed_.end() || !it->second.app) return CUDA_ERROR_INVALID_VALUE;
  Backed& b = it->second;
  CUresult rc = CUDA_SUCCESS;
  if (b.handle != 0 && !b.app->released) rc = calls_.cuMemRelease(b.handle);
  if (rc == CUDA_SUCCESS) b.app->released = true;
  return rc;
}

CUresult SwapEngine::map_app_physical(CUdeviceptr va, const Backed& b,
                                      CUmemGenericAllocationHandle* handle) {
  CUresult rc = calls_.cuMemCreate(handle, b.size, &b.app->prop, 0);
  if (rc != CUDA_SUCCESS) return rc;
  rc = calls_.cuMemMap(va, b.size, 0, *handle, 0);
  if (rc == CUDA_SUCCESS) {
    rc = calls_.cuMemSetAccess(va, b.size, b.app->access.data(), b.app->access.size());
    if (rc != CUDA_SUCCESS) calls_.cuMemUnmap(va, b.size);
  }
  if (rc != CUDA_SUCCESS || b.app->released) calls_.cuMemRelease(*handle);  // released: the
  return rc;  // mapping holds the memory, as it did before the move
}

CUresult SwapEngine::restore_app_handle(const TenantDevice& device, uint64_t size,
                                        const CUmemAllocationProp& prop, void* host,
                                        CUmemGenericAllocationHandle* real) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  Backed b;
  b.index = device.index;
  b.ordinal = device.ordinal;
  b.size = size;
  reserve_back(b);
  CUmemGenericAllocationHandle handle = 0;
  CUresult rc;
  int64_t backoff_ns = 5'000'000;
  while ((rc = calls_.cuMemCreate(&handle, size, &prop, 0)) == CUDA_ERROR_OUT_OF_MEMORY) {
    pause_ns(backoff_ns);  // the broker is moving a borrower's memory out (bring_back)
    backoff_ns = std::min<int64_t>(backoff_ns * 2, 100'000'000);
  }
  // The copy goes through a mapping of our own, gone before the application maps it.
  CUdeviceptr va = 0;
  if (rc == CUDA_SUCCESS) rc = calls_.cuMemAddressReserve(&va, size, 0, 0, 0);
  if (rc == CUDA_SUCCESS) {
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    rc = calls_.cuMemMap(va, size, 0, handle, 0);
    if (rc == CUDA_SUCCESS) {
      rc = calls_.cuMemSetAccess(va, size, &access, 1);
      if (rc == CUDA_SUCCESS) rc = staging_.copy_in(host, va);  // its chunks, in order
      calls_.cuMemUnmap(va, size);
    }
    calls_.cuMemAddressFree(va, size);
  }
  if (rc != CUDA_SUCCESS) {
    FRACGPU_LOG_CAPPED(LogLevel::kError, 8,
                       "cannot bring %llu bytes of an unmapped handle back from host memory "
                       "(CUDA error %d)",
                       static_cast<unsigned long long>(size), static_cast<int>(rc));
    if (handle != 0) calls_.cuMemRelease(handle);
    memory_.release(b.index, size);
    return rc;
  }
  memory_.tenant().ledger().left_host(static_cast<uint32_t>(b.index), size);
  retired_hosts_.push_back({host, size});
  *real = handle;
  return CUDA_SUCCESS;
}

void SwapEngine::retire_host(void* host, uint64_t size) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  retired_hosts_.push_back({host, size});
}

}  // namespace fracgpu
