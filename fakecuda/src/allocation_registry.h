// The process-local map of memory the fake driver knows about: device allocations
// (backed by real host pages so that CUdeviceptr is a usable address), managed and
// pinned host memory, registered host ranges and VMM mappings. Copies, sets and
// kernels check their ranges against it, which turns a bad device pointer into a CUDA
// error (or a sticky CUDA_ERROR_ILLEGAL_ADDRESS) instead of a segfault, and pointer
// attribute queries are answered from it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <shared_mutex>
#include <vector>

namespace fakecuda {

// IpcMapping: another process's cuMemAlloc memory opened with cuIpcOpenMemHandle (ipc_memory.h).
enum class MemoryKind { Device, Managed, Host, HostRegistered, VmmMapping, IpcMapping };

struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  MemoryKind kind = MemoryKind::Device;
  uint32_t device = 0;
  uint64_t charged_bytes = 0;  // device memory charged for it (0 for host kinds)
  CUcontext context = nullptr;
  CUmemoryPool pool = nullptr;
  uint64_t buffer_id = 0;
  void* mapping = nullptr;  // what to munmap when freed (null: not ours to unmap)
  size_t mapping_length = 0;
  unsigned host_flags = 0;
  uint64_t vmm_handle = 0;
  int ipc_fd = -1;  // the memfd now backing it once exported with cuIpcGetMemHandle

  bool is_host_kind() const {
    return kind == MemoryKind::Host || kind == MemoryKind::HostRegistered;
  }
  // What cuIpcGetMemHandle accepts: cuMemAlloc memory (not managed, VMM, pool or graph
  // memory, whose range belongs to its graph allocation: mapping is null).
  bool legacy_ipc_capable() const {
    return kind == MemoryKind::Device && pool == nullptr && mapping != nullptr;
  }
};

class AllocationRegistry {
 public:
  void insert(const Allocation& allocation);

  // The allocation containing address `p`, if any.
  std::optional<Allocation> find(uintptr_t p) const;

  // True when [p, p + bytes) lies inside one known allocation.
  bool covers(uintptr_t p, size_t bytes) const;

  // True when any known allocation shares a byte with [p, p + bytes).
  bool overlaps(uintptr_t p, size_t bytes) const;

  // Applies `change` to the allocation starting exactly at `base`; false when there is none.
  bool update(uintptr_t base, const std::function<void(Allocation&)>& change);

  // Removes and returns the allocation starting exactly at `base`.
  std::optional<Allocation> take(uintptr_t base);

  // Removes and returns every allocation matching `predicate`.
  std::vector<Allocation> take_if(const std::function<bool(const Allocation&)>& predicate);

 private:
  std::map<uintptr_t, Allocation>::const_iterator locate(uintptr_t p) const;

  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Allocation> by_base_;
};

}  // namespace fakecuda
