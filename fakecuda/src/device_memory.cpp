// Device/host allocation backed by anonymous mappings (see device_memory.h).
#include "device_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include "context.h"
#include "driver.h"
#include "mem_pool.h"

namespace fakecuda {
namespace {

size_t page_rounded(size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void* map_backing(size_t length, bool low_address) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  if (low_address) flags |= MAP_32BIT;
  void* address = mmap(nullptr, length, PROT_READ | PROT_WRITE, flags, -1, 0);
  return address == MAP_FAILED ? nullptr : address;
}

void note_pool_usage(Driver& driver, CUmemoryPool pool, uint64_t bytes, bool allocated) {
  if (pool == nullptr) return;
  std::shared_ptr<MemPool> owner = driver.handles.get<MemPool>(pool);
  if (!owner) return;  // pool destroyed while allocations were outstanding
  if (allocated) {
    owner->on_allocate(bytes);
  } else {
    owner->on_free(bytes);
  }
}

}  // namespace

CUresult allocate_device_memory(Driver& driver, Context& context,
                                const DeviceAllocationRequest& request, CUdeviceptr& out) {
  if (request.bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  uint32_t device = request.device >= 0 ? static_cast<uint32_t>(request.device) : context.device();
  if (!driver.memory().charge(device, request.bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t length = page_rounded(request.bytes);
  void* backing = map_backing(length, request.low_address);
  if (backing == nullptr) {
    driver.memory().uncharge(device, request.bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Allocation allocation;
  allocation.base = reinterpret_cast<uintptr_t>(backing);
  allocation.size = request.bytes;
  allocation.kind = request.kind;
  allocation.device = device;
  allocation.charged_bytes = request.bytes;
  allocation.context = context.handle();
  allocation.pool = request.pool;
  allocation.buffer_id = driver.next_id();
  allocation.mapping = backing;
  allocation.mapping_length = length;
  driver.allocations.insert(allocation);
  note_pool_usage(driver, request.pool, request.bytes, true);
  out = allocation.base;
  return CUDA_SUCCESS;
}

CUresult allocate_host_memory(Driver& driver, Context& context, size_t bytes, unsigned flags,
                              bool low_address, void*& out) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t length = page_rounded(bytes);
  void* backing = map_backing(length, low_address);
  if (backing == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation allocation;
  allocation.base = reinterpret_cast<uintptr_t>(backing);
  allocation.size = bytes;
  allocation.kind = MemoryKind::Host;
  allocation.device = context.device();
  allocation.context = context.handle();
  allocation.buffer_id = driver.next_id();
  allocation.mapping = backing;
  allocation.mapping_length = length;
  allocation.host_flags = flags;
  driver.allocations.insert(allocation);
  out = backing;
  return CUDA_SUCCESS;
}

void release_allocation(Driver& driver, const Allocation& allocation) {
  if (allocation.mapping != nullptr) munmap(allocation.mapping, allocation.mapping_length);
  if (allocation.ipc_fd >= 0) close(allocation.ipc_fd);  // later opens of its handle fail
  if (allocation.charged_bytes != 0)
    driver.memory().uncharge(allocation.device, allocation.charged_bytes);
  note_pool_usage(driver, allocation.pool, allocation.charged_bytes, false);
}

void drain_all_contexts(Driver& driver) {
  for (const std::shared_ptr<Context>& context : driver.handles.all<Context>())
    context->queue().drain();
}

CUresult free_device_memory(Driver& driver, CUdeviceptr pointer) {
  if (pointer == 0) return CUDA_SUCCESS;
  // A graph allocation the graph did not free goes back to the graph memory pool.
  if (std::shared_ptr<GraphAllocation> graph = graph_memory()->find(pointer)) {
    drain_all_contexts(driver);
    return graph_memory()->free_now(graph);
  }
  std::optional<Allocation> found = driver.allocations.find(pointer);
  if (!found || found->base != pointer ||
      (found->kind != MemoryKind::Device && found->kind != MemoryKind::Managed)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  drain_all_contexts(driver);  // like the real cuMemFree, an implicit synchronisation
  std::optional<Allocation> taken = driver.allocations.take(pointer);
  if (!taken) return CUDA_ERROR_INVALID_VALUE;  // freed concurrently by another thread
  release_allocation(driver, *taken);
  return CUDA_SUCCESS;
}

CUresult free_host_memory(Driver& driver, void* pointer) {
  uintptr_t base = reinterpret_cast<uintptr_t>(pointer);
  std::optional<Allocation> found = driver.allocations.find(base);
  if (pointer == nullptr || !found || found->base != base || found->kind != MemoryKind::Host) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  drain_all_contexts(driver);
  std::optional<Allocation> taken = driver.allocations.take(base);
  if (!taken) return CUDA_ERROR_INVALID_VALUE;
  release_allocation(driver, *taken);
  return CUDA_SUCCESS;
}

void free_context_memory(Driver& driver, CUcontext context) {
  std::vector<Allocation> owned =
      driver.allocations.take_if([context](const Allocation& allocation) {
        return allocation.context == context && allocation.kind != MemoryKind::VmmMapping;
      });
  for (const Allocation& allocation : owned) release_allocation(driver, allocation);
}

}  // namespace fakecuda
