// AppVmm: the application's own virtual-memory-management memory (PyTorch's expandable
// segments: cuMemCreate + cuMemMap + cuMemSetAccess), made swappable for a tenant whose
// quota says kSwapAllow (docs/design.md "Overcommit and swap").
//
// A physical handle the application created swaps when it is mapped exactly once, over its
// whole size, with access set, and was neither exported (cuMemExportToShareableHandle) nor
// imported: such a mapping is handed to SwapEngine as an application-owned record, so the
// engine's swap-out (copy to host, unmap, release the real handle, keep the range) and
// swap-in (cuMemCreate with the application's properties, cuMemMap at the same address,
// cuMemSetAccess with the application's descriptors, copy back) apply unchanged, with the
// residency gate, the broker's resident_target and the ledger's swapped bytes. Everything
// else (created but unmapped, mapped twice or partly, exported, imported) stays resident and
// is reported pinned, as before.
//
// After a swap-in the physical memory is a new driver handle, so application handles are
// virtual: AppHandleTable maps the application's value to the driver's handle of now. The
// first value is the driver's own (identity: a process that never swaps sees nothing
// different); a driver handle whose value still names another application handle (a released
// handle's value reused) is given a value of ours (kMintedTag, never a user-space pointer).
// Every hook that takes or returns a handle translates: cuMemMap, cuMemRelease,
// cuMemExportToShareableHandle, cuMemGetAllocationPropertiesFromHandle,
// cuMemRetainAllocationHandle, cuMemImportFromShareableHandle.
//
// Unmapping a mapping whose bytes are on host releases nothing real; the copy stays until the
// handle is released (then it leaves the books exactly: VmmMemory settles it from the host
// count) or is mapped again (brought back first).
//
// Cost: a tenant with swap "never" (or a process that never created a handle under "allow")
// pays one relaxed load per VMM call; otherwise one mutex per VMM call (none is hot).
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/memory_policy.h"
#include "core/swap_engine.h"
#include "core/vmm_memory.h"

namespace fracgpu {

// The application's handles and their mappings; pure bookkeeping (no driver, no lock).
class AppHandleTable {
 public:
  using Handle = CUmemGenericAllocationHandle;
  static constexpr Handle kMintedTag = 0xf6a0'0000'0000'0000ull;  // non-canonical address

  struct Entry {
    Handle real = 0;  // the driver's handle now (while adopted the engine's record has it)
    uint64_t size = 0;
    CUmemAllocationProp prop{};
    TenantDevice device;
    bool created = false;   // by the application's cuMemCreate (not imported, not an alias)
    bool exported = false;  // another process may map its pages
    int references = 1;     // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
    int mappings = 0;
    CUdeviceptr va = 0;                   // its mapping while it has exactly one
    bool whole = false;                   // that mapping: offset 0, the whole size
    std::vector<CUmemAccessDesc> access;  // set by the application over that mapping
    CUdeviceptr adopted = 0;  // where the mapping SwapEngine holds is (0: none; it stays
                              // there, pinned, when the handle is mapped a second time)
    void* host = nullptr;     // its bytes while on host and unmapped
  };

  // A new handle the driver gave (cuMemCreate, an import): the application's value for it.
  Handle add(Handle real, Entry entry);
  Entry* find(Handle app);
  void erase(Handle app);
  // The application's value for a driver handle that is not (or no longer) an entry's own
  // value: itself unless that value names an entry, else an alias entry of ours.
  Handle value_for(Handle real);
  // The handle mapped over `ptr` (any byte of the mapping), if one of ours.
  std::optional<Handle> mapped_at(CUdeviceptr ptr) const;
  void mapped(Handle app, CUdeviceptr va, uint64_t size, uint64_t offset);
  void unmapped(Handle app, CUdeviceptr va);
  // The mappings starting in [ptr, ptr + size).
  std::vector<std::pair<CUdeviceptr, Handle>> mappings_in(CUdeviceptr ptr, uint64_t size) const;
  // The swappable rule (see the banner).
  static bool swappable(const Entry& e) noexcept;
  std::size_t size() const { return entries_.size(); }
  void clear();

 private:
  std::unordered_map<Handle, Entry> entries_;
  std::map<CUdeviceptr, std::pair<uint64_t, Handle>> mappings_;  // va -> (size, app handle)
  std::unordered_map<Handle, Handle> aliases_;  // driver handle -> the alias we gave for it
  Handle next_minted_ = kMintedTag | 1;
};

class AppVmm {
 public:
  AppVmm(MemoryPolicy& memory, VmmMemory& vmm, SwapEngine& swap)
      : memory_(memory), vmm_(vmm), swap_(swap), calls_(memory.driver()) {}

  // The hook bodies (vmm_hooks.cpp): `real` is the driver's function.
  CUresult create(CUmemGenericAllocationHandle* handle, size_t size,
                  const CUmemAllocationProp* prop, unsigned long long flags,
                  PFN_cuMemCreate_v10020 real);
  CUresult map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
               unsigned long long flags, PFN_cuMemMap_v10020 real);
  CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count,
                      PFN_cuMemSetAccess_v10020 real);
  CUresult unmap(CUdeviceptr ptr, size_t size, PFN_cuMemUnmap_v10020 real);
  CUresult release(CUmemGenericAllocationHandle handle, PFN_cuMemRelease_v10020 real);
  CUresult retain(CUmemGenericAllocationHandle* handle, void* addr,
                  PFN_cuMemRetainAllocationHandle_v11000 real);
  CUresult properties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle,
                      PFN_cuMemGetAllocationPropertiesFromHandle_v10020 real);
  CUresult import(CUmemGenericAllocationHandle* handle, void* os_handle,
                  CUmemAllocationHandleType type, PFN_cuMemImportFromShareableHandle_v10020 real);
  // cuMemExportToShareableHandle: the handle is pinned resident for good; returns the
  // driver's handle to export.
  CUmemGenericAllocationHandle exported(CUmemGenericAllocationHandle handle) noexcept;

  bool active() const noexcept { return active_.load(std::memory_order_relaxed); }
  std::size_t handles() const;
  void after_fork_in_child() noexcept;

 private:
  bool swap_allowed(const TenantDevice& device) const noexcept;
  // The driver's handle for the application's value; nullopt when not ours. Under mutex_.
  std::optional<CUmemGenericAllocationHandle> real_of(CUmemGenericAllocationHandle app);
  void adopt_if_swappable(CUmemGenericAllocationHandle app);  // under mutex_
  void pin(CUmemGenericAllocationHandle app);                 // under mutex_: never swaps again
  void forget_if_done(CUmemGenericAllocationHandle app);      // under mutex_

  MemoryPolicy& memory_;
  VmmMemory& vmm_;
  SwapEngine& swap_;
  const DriverCalls& calls_;
  std::atomic<bool> active_{false};  // a handle was ever tracked
  mutable std::mutex mutex_;
  AppHandleTable table_;
};

}  // namespace fracgpu
