// Memory pools for stream-ordered allocation (cuMemAllocAsync & co.). A pool does not
// cache: allocations go straight to the device and frees return memory when the
// stream reaches them, so there is never cached memory for cuMemPoolTrimTo to trim and
// the device's used counter always equals what the application holds. A pool keeps the
// attributes applications set and read (release threshold, reuse flags, usage).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "handle_registry.h"
#include "shared_segment.h"

namespace fakecuda {

class MemPool : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::MemPool;

  MemPool(uint32_t device, const CUmemPoolProps& props, bool is_default)
      : HandleObject(kKind), device_(device), props_(props), is_default_(is_default) {}

  CUmemoryPool handle() { return reinterpret_cast<CUmemoryPool>(this); }
  uint32_t device() const { return device_; }
  bool is_default() const { return is_default_; }
  const CUmemPoolProps& props() const { return props_; }

  void on_allocate(uint64_t bytes);
  void on_free(uint64_t bytes);

  CUresult set_attribute(CUmemPool_attribute attribute, const void* value);
  CUresult get_attribute(CUmemPool_attribute attribute, void* value);

 private:
  uint32_t device_;
  CUmemPoolProps props_;
  bool is_default_;
  std::mutex mutex_;
  uint64_t release_threshold_ = 0;
  int reuse_follow_event_ = 1;
  int reuse_opportunistic_ = 1;
  int reuse_internal_dependencies_ = 1;
  uint64_t used_current_ = 0;
  uint64_t used_high_ = 0;
};

}  // namespace fakecuda

// ---------------------------------------------------------------------------------
// Graph memory (graph memory nodes: cuGraphAddMemAllocNode, cuMemAllocAsync while
// capturing). Like the real driver, each process has a graph memory pool per device,
// separate from the stream-ordered pools above:
//  - An allocation node reserves a virtual address range when it is created (fixed
//    for the node's lifetime, the same in every instantiation and launch) and makes it
//    known to the allocation registry, so captured copies, sets and kernels on it
//    validate; nothing is charged to the device then.
//  - Launching (or uploading) an executable graph maps physical memory behind all of
//    its allocations: the pool's idle reserve is used first, the rest is charged to the
//    shared device (CUDA_ERROR_OUT_OF_MEMORY, with nothing changed, when it does not
//    fit). The memory then stays mapped to the executable graph and is reused by every
//    later launch.
//  - Destroying the executable graph unmaps its memory but keeps it reserved by the
//    pool (reused by other graphs' launches); cuDeviceGraphMemTrim gives back every
//    block that no launch in flight and no unfreed allocation uses, idle executable
//    graphs' blocks included (their next launch maps again).
//  - An allocation the graph does not free outlives the launch ("outstanding") until
//    cuMemFree/cuMemFreeAsync or a free node of another graph frees it; relaunching
//    its graph before that fails with CUDA_ERROR_INVALID_VALUE unless the graph was
//    instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.
// CU_GRAPH_MEM_ATTR_USED_MEM_* count mapped bytes, RESERVED_MEM_* the bytes charged.
// Simplifications: an executable graph needs the sum of its allocation sizes (the real
// driver may overlap allocations whose lifetimes do not overlap inside one graph);
// "mapping" is accounting only: the range is host memory (MAP_NORESERVE) from the
// node's creation, and unmapping drops its pages (contents are lost), so touching an
// unmapped graph allocation reads zeros instead of faulting like a real GPU.
namespace fakecuda {

class Driver;

class GraphAllocation {
 public:
  // Reserves the range and registers it with `driver`'s allocation registry; null if
  // mmap fails.
  static std::shared_ptr<GraphAllocation> reserve(Driver& driver, uint32_t device,
                                                  CUcontext context, size_t bytes);
  GraphAllocation(Driver& driver, uint32_t device, size_t bytes, void* range, size_t length);
  // Unregisters (while its driver is still the current one) and unmaps the range.
  ~GraphAllocation();
  GraphAllocation(const GraphAllocation&) = delete;
  GraphAllocation& operator=(const GraphAllocation&) = delete;

  CUdeviceptr base() const { return reinterpret_cast<CUdeviceptr>(range_); }
  size_t size() const { return size_; }
  uint32_t device() const { return device_; }

 private:
  friend class GraphMemory;
  Driver* driver_;
  uint64_t generation_;
  uint32_t device_;
  size_t size_;
  void* range_;
  size_t length_;
  // Guarded by the GraphMemory mutex.
  bool mapped_ = false;
  bool outstanding_ = false;     // allocated by a launch and not freed yet
  int in_flight_ = 0;            // queued launches / frees that use it
  const void* owner_ = nullptr;  // the executable graph instantiated with it
};

using GraphAllocations = std::vector<std::shared_ptr<GraphAllocation>>;

// What one executable graph does with graph memory.
struct GraphMemoryPlan {
  GraphAllocations allocated;      // by its allocation nodes
  std::vector<bool> freed_inside;  // parallel to `allocated`: a free node of the graph frees it
  GraphAllocations freed_foreign;  // free nodes for other graphs' allocations
  bool auto_free = false;          // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
  bool empty() const { return allocated.empty() && freed_foreign.empty(); }
};

class GraphMemory {
 public:
  ~GraphMemory();

  // A new allocation node's range; null if no address space is left.
  std::shared_ptr<GraphAllocation> create(Driver& driver, uint32_t device, CUcontext context,
                                          size_t bytes);
  // The allocation whose range starts at `base` (mapped or not), or null.
  std::shared_ptr<GraphAllocation> find(CUdeviceptr base);

  // Instantiation: an allocation belongs to at most one executable graph at a time.
  CUresult claim(const void* exec, const GraphAllocations& allocations);
  // cuGraphExecDestroy: the graph's idle memory goes back to the pool's reserve.
  void disown(const void* exec, const GraphAllocations& allocations);

  // cuGraphUpload: maps the graph's memory.
  CUresult upload(Driver& driver, const GraphAllocations& allocations);
  // cuGraphLaunch (host side, before the work is queued): checks, maps, marks in flight.
  CUresult begin_launch(Driver& driver, const GraphMemoryPlan& plan);
  // The launch finished on the device.
  void end_launch(const GraphMemoryPlan& plan);

  // cuMemFree of a graph allocation (the caller synchronised first).
  CUresult free_now(const std::shared_ptr<GraphAllocation>& allocation);
  // cuMemFreeAsync: freed at once for the API, unmappable once the stream reached it.
  CUresult begin_free_async(const std::shared_ptr<GraphAllocation>& allocation);
  void end_free_async(const std::shared_ptr<GraphAllocation>& allocation);

  // cuDeviceGraphMemTrim.
  void trim(Driver& driver, uint32_t device);
  CUresult get_attribute(uint32_t device, CUgraphMem_attribute attribute, void* value);
  CUresult set_attribute(uint32_t device, CUgraphMem_attribute attribute, const void* value);

  // Bytes mapped on `device` (tests, status).
  uint64_t used(uint32_t device);
  uint64_t reserved(uint32_t device);

 private:
  struct Counters {
    uint64_t reserved = 0;
    uint64_t used = 0;
    uint64_t reserved_high = 0;
    uint64_t used_high = 0;
  };
  CUresult map_locked(Driver& driver, const GraphAllocations& allocations);
  void map_one_locked(const std::shared_ptr<GraphAllocation>& allocation);
  void unmap_locked(GraphAllocation& allocation);
  // Unmaps what nothing uses any more: no owner, not outstanding, not in flight.
  void release_unused_locked();

  std::mutex mutex_;
  std::array<Counters, kMaxDevices> counters_{};
  std::map<CUdeviceptr, std::weak_ptr<GraphAllocation>> known_;
  std::map<CUdeviceptr, std::shared_ptr<GraphAllocation>> mapped_;
};

// This process's graph memory (one per driver lifetime).
std::shared_ptr<GraphMemory> graph_memory();

}  // namespace fakecuda
