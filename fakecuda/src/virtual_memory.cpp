// memfd-backed physical allocations and MAP_FIXED mappings (see virtual_memory.h).
#include "virtual_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "allocation_registry.h"
#include "config.h"
#include "memory_accounting.h"
#include "shared_physical.h"

namespace fakecuda {
namespace {

bool aligned(uint64_t value) {
  return value % kVmmGranularity == 0;
}

// Which memfd a descriptor names (two handles of one exported allocation share it).
uint64_t inode_of(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

// Puts inaccessible address space back over a range (keeps the reservation intact).
void make_inaccessible(uintptr_t ptr, size_t size) {
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

}  // namespace

CUresult VirtualMemoryTable::create(MemoryAccounting& accounting, size_t size,
                                    const CUmemAllocationProp& prop,
                                    CUmemGenericAllocationHandle& handle) {
  if (size == 0 || !aligned(size) || prop.type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id < 0 ||
      static_cast<uint32_t>(prop.location.id) >= kMaxDevices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint32_t device = static_cast<uint32_t>(prop.location.id);
  if (!accounting.charge(device, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const bool exportable =
      (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  int fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
  SharedPhysicalHeader* shared = nullptr;
  bool sized = fd >= 0;
  if (sized && exportable) {
    shared = create_shared_header(fd, device, size, accounting.owner());
    sized = shared != nullptr;
  } else if (sized) {
    sized = ftruncate(fd, static_cast<off_t>(size)) == 0;
  }
  if (!sized) {
    if (fd >= 0) close(fd);
    accounting.uncharge(device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard lock(mutex_);
  handle = next_handle_++;
  Physical& physical = physical_[handle];
  physical.memfd = fd;
  physical.size = size;
  physical.prop = prop;
  physical.shared = shared;
  physical.inode = inode_of(fd);
  return CUDA_SUCCESS;
}

// The memory leaves this process. Exportable memory stays charged to its creator while
// another live process holds it (the last holder anywhere returns the charge); another
// handle of it here (imported back, say) keeps this process a holder.
void VirtualMemoryTable::drop(MemoryAccounting& accounting, CUmemGenericAllocationHandle handle) {
  Physical& physical = physical_.at(handle);
  if (physical.shared == nullptr) {
    close(physical.memfd);
    accounting.uncharge(static_cast<uint32_t>(physical.prop.location.id), physical.size);
    return;
  }
  bool still_held = false;
  for (const auto& [other, entry] : physical_)
    still_held =
        still_held || (other != handle && entry.shared != nullptr && entry.inode == physical.inode);
  close(physical.memfd);
  if (still_held) {
    munmap(physical.shared, kSharedHeaderBytes);
  } else {
    release_shared_header(physical.shared, accounting);
  }
}

CUresult VirtualMemoryTable::export_fd(CUmemGenericAllocationHandle handle, int& fd) {
  std::lock_guard lock(mutex_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  // The real driver exports only the handle types asked for at cuMemCreate.
  if (it->second.shared == nullptr) return CUDA_ERROR_INVALID_VALUE;
  fd = fcntl(it->second.memfd, F_DUPFD_CLOEXEC, 0);
  return fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult VirtualMemoryTable::import_fd(MemoryAccounting& accounting, int fd,
                                       CUmemGenericAllocationHandle& handle) {
  SharedPhysicalHeader* shared = attach_shared_header(fd);
  if (shared == nullptr) return CUDA_ERROR_INVALID_VALUE;  // not memory a driver exported
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    munmap(shared, kSharedHeaderBytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  add_holder(shared, accounting);
  std::lock_guard lock(mutex_);
  handle = next_handle_++;
  Physical& physical = physical_[handle];
  physical.memfd = own;
  physical.size = shared->size;
  physical.prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  physical.prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  physical.prop.location.id = static_cast<int>(shared->device);
  physical.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  physical.shared = shared;
  physical.inode = inode_of(own);
  return CUDA_SUCCESS;
}

void VirtualMemoryTable::drop_if_unused(MemoryAccounting& accounting,
                                        CUmemGenericAllocationHandle handle) {
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.references > 0 || it->second.mappings > 0) return;
  drop(accounting, handle);
  physical_.erase(it);
}

CUresult VirtualMemoryTable::release(MemoryAccounting& accounting,
                                     CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(mutex_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.references;
  drop_if_unused(accounting, handle);  // memory stays while still mapped, as on the real driver
  return CUDA_SUCCESS;
}

CUresult VirtualMemoryTable::properties(CUmemGenericAllocationHandle handle,
                                        CUmemAllocationProp& prop) {
  std::lock_guard lock(mutex_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.references == 0) return CUDA_ERROR_INVALID_VALUE;
  prop = it->second.prop;
  return CUDA_SUCCESS;
}

CUresult VirtualMemoryTable::reserve(size_t size, size_t alignment, CUdeviceptr hint,
                                     CUdeviceptr& out) {
  if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  if (alignment == 0) alignment = kVmmGranularity;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  size_t length = size + alignment;
  void* raw = mmap(reinterpret_cast<void*>(hint), length, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t base = (start + alignment - 1) & ~(static_cast<uintptr_t>(alignment) - 1);
  // Trim the slack on both sides so the reservation is exactly [base, base + size).
  if (base > start) munmap(raw, base - start);
  if (start + length > base + size)
    munmap(reinterpret_cast<void*>(base + size), start + length - (base + size));
  std::lock_guard lock(mutex_);
  reservations_[base] = Reservation{size};
  out = base;
  return CUDA_SUCCESS;
}

CUresult VirtualMemoryTable::free_reservation(CUdeviceptr ptr, size_t size) {
  std::lock_guard lock(mutex_);
  auto it = reservations_.find(ptr);
  if (it == reservations_.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(ptr), size);
  reservations_.erase(it);
  return CUDA_SUCCESS;
}

bool VirtualMemoryTable::inside_reservation(uintptr_t ptr, size_t size) const {
  auto it = reservations_.upper_bound(ptr);
  if (it == reservations_.begin()) return false;
  --it;
  return ptr >= it->first && ptr - it->first <= it->second.size &&
         size <= it->second.size - (ptr - it->first);
}

CUresult VirtualMemoryTable::map(AllocationRegistry& registry, CUdeviceptr ptr, size_t size,
                                 size_t offset, CUmemGenericAllocationHandle handle) {
  if (size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  auto it = physical_.find(handle);
  if (it == physical_.end() || it->second.references == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > it->second.size || size > it->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
  if (!inside_reservation(ptr, size) || registry.find(ptr) || registry.find(ptr + size - 1)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* mapped = mmap(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED, it->second.memfd, static_cast<off_t>(offset));
  if (mapped == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++it->second.mappings;
  Allocation allocation;
  allocation.base = ptr;
  allocation.size = size;
  allocation.kind = MemoryKind::VmmMapping;
  allocation.device = static_cast<uint32_t>(it->second.prop.location.id);
  allocation.vmm_handle = handle;
  allocation.buffer_id = handle;
  registry.insert(allocation);
  return CUDA_SUCCESS;
}

CUresult VirtualMemoryTable::unmap(MemoryAccounting& accounting, AllocationRegistry& registry,
                                   CUdeviceptr ptr, size_t size) {
  if (size == 0 || !aligned(ptr) || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  if (!inside_reservation(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<Allocation> removed = registry.take_if([ptr, size](const Allocation& allocation) {
    return allocation.kind == MemoryKind::VmmMapping && allocation.base >= ptr &&
           allocation.base - ptr < size;
  });
  make_inaccessible(ptr, size);
  for (const Allocation& allocation : removed) {
    auto it = physical_.find(allocation.vmm_handle);
    if (it == physical_.end()) continue;
    --it->second.mappings;
    drop_if_unused(accounting, allocation.vmm_handle);
  }
  return CUDA_SUCCESS;
}

CUresult VirtualMemoryTable::retain(AllocationRegistry& registry, uintptr_t address,
                                    CUmemGenericAllocationHandle& handle) {
  std::optional<Allocation> allocation = registry.find(address);
  if (!allocation || allocation->kind != MemoryKind::VmmMapping) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  auto it = physical_.find(allocation->vmm_handle);
  if (it == physical_.end()) return CUDA_ERROR_INVALID_VALUE;
  ++it->second.references;
  handle = allocation->vmm_handle;
  return CUDA_SUCCESS;
}

bool VirtualMemoryTable::mapped(const AllocationRegistry& registry, CUdeviceptr ptr,
                                size_t size) const {
  // Mappings may be adjacent pieces; walk them.
  uintptr_t cursor = ptr;
  while (cursor < ptr + size) {
    std::optional<Allocation> piece = registry.find(cursor);
    if (!piece || piece->kind != MemoryKind::VmmMapping) return false;
    cursor = piece->base + piece->size;
  }
  return true;
}

void VirtualMemoryTable::release_all(MemoryAccounting& accounting) {
  std::lock_guard lock(mutex_);
  for (auto& [base, reservation] : reservations_)
    munmap(reinterpret_cast<void*>(base), reservation.size);
  reservations_.clear();
  for (auto it = physical_.begin(); it != physical_.end(); it = physical_.erase(it))
    drop(accounting, it->first);
}

}  // namespace fakecuda
