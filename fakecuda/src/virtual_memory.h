// Virtual memory management (cuMemCreate / cuMemAddressReserve / cuMemMap …), the API
// PyTorch's expandable segments and JAX use. A physical allocation is a memfd of the
// requested size (pages cost nothing until touched), charged to its device when
// created; reserving address space is a PROT_NONE mapping; mapping places the memfd
// into the reserved range with MAP_FIXED, so two mappings of one handle really share
// data. Physical memory is returned when its handle is released and unmapped — in every
// process that holds it, for memory created exportable (POSIX file descriptor requested,
// shared_physical.h): cuMemExportToShareableHandle hands out a descriptor of its memfd and
// cuMemImportFromShareableHandle makes another process a holder (not charged: the creator
// is, as on a real GPU the exporter's memory counts once).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace fakecuda {

class AllocationRegistry;
class MemoryAccounting;
struct SharedPhysicalHeader;

inline constexpr size_t kVmmGranularity = 2ull << 20;  // 2 MiB, as on real GPUs

class VirtualMemoryTable {
 public:
  CUresult create(MemoryAccounting& accounting, size_t size, const CUmemAllocationProp& prop,
                  CUmemGenericAllocationHandle& handle);
  CUresult release(MemoryAccounting& accounting, CUmemGenericAllocationHandle handle);
  CUresult properties(CUmemGenericAllocationHandle handle, CUmemAllocationProp& prop);
  CUresult reserve(size_t size, size_t alignment, CUdeviceptr hint, CUdeviceptr& out);
  CUresult free_reservation(CUdeviceptr ptr, size_t size);
  CUresult map(AllocationRegistry& registry, CUdeviceptr ptr, size_t size, size_t offset,
               CUmemGenericAllocationHandle handle);
  CUresult unmap(MemoryAccounting& accounting, AllocationRegistry& registry, CUdeviceptr ptr,
                 size_t size);
  CUresult retain(AllocationRegistry& registry, uintptr_t address,
                  CUmemGenericAllocationHandle& handle);
  // cuMemExportToShareableHandle (POSIX file descriptor): a new descriptor of the memfd.
  CUresult export_fd(CUmemGenericAllocationHandle handle, int& fd);
  // cuMemImportFromShareableHandle: a new handle of the memory behind `fd` (which stays the
  // caller's); its properties carry the physical device.
  CUresult import_fd(MemoryAccounting& accounting, int fd, CUmemGenericAllocationHandle& handle);
  // True when [ptr, ptr+size) is entirely mapped (for cuMemSetAccess checks).
  bool mapped(const AllocationRegistry& registry, CUdeviceptr ptr, size_t size) const;
  // Releases everything (shutdown): unmaps, closes memfds and uncharges.
  void release_all(MemoryAccounting& accounting);

 private:
  struct Physical {
    int memfd = -1;
    size_t size = 0;
    CUmemAllocationProp prop{};
    int references = 1;  // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
    int mappings = 0;
    SharedPhysicalHeader* shared = nullptr;  // exportable: holders across processes
    uint64_t inode = 0;                      // of the memfd
  };
  struct Reservation {
    size_t size = 0;
  };

  void drop_if_unused(MemoryAccounting& accounting, CUmemGenericAllocationHandle handle);
  void drop(MemoryAccounting& accounting, CUmemGenericAllocationHandle handle);
  bool inside_reservation(uintptr_t ptr, size_t size) const;

  std::mutex mutex_;
  std::map<CUmemGenericAllocationHandle, Physical> physical_;
  std::map<uintptr_t, Reservation> reservations_;
  CUmemGenericAllocationHandle next_handle_ = 0x1000;
};

}  // namespace fakecuda
