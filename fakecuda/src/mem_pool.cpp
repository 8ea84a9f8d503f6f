// Pool attributes and usage statistics (see mem_pool.h). Because pools never cache,
// "reserved" memory always equals "used" memory.
#include "mem_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "driver.h"

namespace fakecuda {

void MemPool::on_allocate(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  used_current_ += bytes;
  used_high_ = std::max(used_high_, used_current_);
}

void MemPool::on_free(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  used_current_ -= std::min(bytes, used_current_);
}

CUresult MemPool::set_attribute(CUmemPool_attribute attribute, const void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      std::memcpy(&reuse_follow_event_, value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      std::memcpy(&reuse_opportunistic_, value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      std::memcpy(&reuse_internal_dependencies_, value, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      std::memcpy(&release_threshold_, value, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
      uint64_t reset;
      std::memcpy(&reset, value, sizeof reset);
      if (reset != 0) return CUDA_ERROR_INVALID_VALUE;  // high-water marks may only be reset
      used_high_ = used_current_;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult MemPool::get_attribute(CUmemPool_attribute attribute, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      std::memcpy(value, &reuse_follow_event_, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      std::memcpy(value, &reuse_opportunistic_, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      std::memcpy(value, &reuse_internal_dependencies_, sizeof(int));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      std::memcpy(value, &release_threshold_, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      std::memcpy(value, &used_current_, sizeof(uint64_t));
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      std::memcpy(value, &used_high_, sizeof(uint64_t));
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace fakecuda

// ---------------------------------------------------------------------------------
// Graph memory (see mem_pool.h).
namespace fakecuda {
namespace {

size_t page_rounded(size_t bytes) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

void raise_high(uint64_t& high, uint64_t current) {
  high = std::max(high, current);
}

}  // namespace

std::shared_ptr<GraphAllocation> GraphAllocation::reserve(Driver& driver, uint32_t device,
                                                          CUcontext context, size_t bytes) {
  if (bytes == 0 || bytes > (size_t{1} << 50)) return nullptr;
  size_t length = page_rounded(bytes);
  void* range = mmap(nullptr, length, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return nullptr;
  auto allocation = std::make_shared<GraphAllocation>(driver, device, bytes, range, length);
  Allocation entry;
  entry.base = allocation->base();
  entry.size = bytes;
  entry.kind = MemoryKind::Device;
  entry.device = device;
  entry.charged_bytes = 0;  // charged to the graph memory pool when mapped
  entry.context = context;
  entry.buffer_id = driver.next_id();
  entry.mapping = nullptr;  // the range belongs to the GraphAllocation
  driver.allocations.insert(entry);
  return allocation;
}

GraphAllocation::GraphAllocation(Driver& driver, uint32_t device, size_t bytes, void* range,
                                 size_t length)
    : driver_(&driver),
      generation_(driver_generation()),
      device_(device),
      size_(bytes),
      range_(range),
      length_(length) {}

GraphAllocation::~GraphAllocation() {
  // At shutdown (or in a forked child) the registry is gone or not ours.
  if (current_driver() == driver_ && driver_generation() == generation_)
    driver_->allocations.take(base());
  munmap(range_, length_);
}

GraphMemory::~GraphMemory() = default;

std::shared_ptr<GraphAllocation> GraphMemory::create(Driver& driver, uint32_t device,
                                                     CUcontext context, size_t bytes) {
  std::shared_ptr<GraphAllocation> allocation =
      GraphAllocation::reserve(driver, device, context, bytes);
  if (!allocation) return nullptr;
  std::lock_guard lock(mutex_);
  if (known_.size() % 256 == 255) {  // forget allocations whose nodes are gone
    std::erase_if(known_, [](const auto& entry) { return entry.second.expired(); });
  }
  known_[allocation->base()] = allocation;
  return allocation;
}

std::shared_ptr<GraphAllocation> GraphMemory::find(CUdeviceptr base) {
  std::lock_guard lock(mutex_);
  auto it = known_.find(base);
  if (it == known_.end()) return nullptr;
  std::shared_ptr<GraphAllocation> allocation = it->second.lock();
  if (!allocation) known_.erase(it);
  return allocation;
}

CUresult GraphMemory::claim(const void* exec, const GraphAllocations& allocations) {
  std::lock_guard lock(mutex_);
  for (const std::shared_ptr<GraphAllocation>& allocation : allocations) {
    if (allocation->owner_ != nullptr && allocation->owner_ != exec)
      return CUDA_ERROR_INVALID_VALUE;
  }
  for (const std::shared_ptr<GraphAllocation>& allocation : allocations) allocation->owner_ = exec;
  return CUDA_SUCCESS;
}

void GraphMemory::disown(const void* exec, const GraphAllocations& allocations) {
  std::lock_guard lock(mutex_);
  for (const std::shared_ptr<GraphAllocation>& allocation : allocations) {
    if (allocation->owner_ == exec) allocation->owner_ = nullptr;
  }
  release_unused_locked();
}

void GraphMemory::map_one_locked(const std::shared_ptr<GraphAllocation>& allocation) {
  allocation->mapped_ = true;
  Counters& counters = counters_[allocation->device_];
  counters.used += allocation->size_;
  raise_high(counters.used_high, counters.used);
  mapped_[allocation->base()] = allocation;
}

void GraphMemory::unmap_locked(GraphAllocation& allocation) {
  madvise(allocation.range_, allocation.length_, MADV_DONTNEED);  // contents are gone
  allocation.mapped_ = false;
  counters_[allocation.device_].used -= allocation.size_;
  mapped_.erase(allocation.base());  // may destroy `allocation`: last use
}

void GraphMemory::release_unused_locked() {
  GraphAllocations idle;
  for (const auto& [base, allocation] : mapped_) {
    if (allocation->owner_ == nullptr && !allocation->outstanding_ && allocation->in_flight_ == 0)
      idle.push_back(allocation);
  }
  for (const std::shared_ptr<GraphAllocation>& allocation : idle) unmap_locked(*allocation);
}

CUresult GraphMemory::map_locked(Driver& driver, const GraphAllocations& allocations) {
  std::array<uint64_t, kMaxDevices> needed{};
  for (const std::shared_ptr<GraphAllocation>& allocation : allocations) {
    if (!allocation->mapped_) needed[allocation->device_] += allocation->size_;
  }
  std::array<uint64_t, kMaxDevices> charged{};
  for (uint32_t device = 0; device < kMaxDevices; ++device) {
    const Counters& counters = counters_[device];
    uint64_t idle = counters.reserved - counters.used;
    uint64_t extra = needed[device] > idle ? needed[device] - idle : 0;
    if (extra == 0) continue;
    if (!driver.memory().charge(device, extra)) {
      for (uint32_t undo = 0; undo < device; ++undo) driver.memory().uncharge(undo, charged[undo]);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    charged[device] = extra;
  }
  for (uint32_t device = 0; device < kMaxDevices; ++device) {
    counters_[device].reserved += charged[device];
    raise_high(counters_[device].reserved_high, counters_[device].reserved);
  }
  for (const std::shared_ptr<GraphAllocation>& allocation : allocations) {
    if (!allocation->mapped_) map_one_locked(allocation);
  }
  return CUDA_SUCCESS;
}

CUresult GraphMemory::upload(Driver& driver, const GraphAllocations& allocations) {
  std::lock_guard lock(mutex_);
  return map_locked(driver, allocations);
}

CUresult GraphMemory::begin_launch(Driver& driver, const GraphMemoryPlan& plan) {
  std::lock_guard lock(mutex_);
  for (const std::shared_ptr<GraphAllocation>& allocation : plan.allocated) {
    // Still allocated by the previous launch: only AUTO_FREE_ON_LAUNCH frees it now.
    if (allocation->outstanding_ && !plan.auto_free) return CUDA_ERROR_INVALID_VALUE;
  }
  for (const std::shared_ptr<GraphAllocation>& allocation : plan.freed_foreign) {
    if (!allocation->outstanding_) return CUDA_ERROR_INVALID_VALUE;  // not allocated now
  }
  CUresult status = map_locked(driver, plan.allocated);
  if (status != CUDA_SUCCESS) return status;
  for (size_t i = 0; i < plan.allocated.size(); ++i) {
    plan.allocated[i]->outstanding_ = !plan.freed_inside[i];
    ++plan.allocated[i]->in_flight_;
  }
  for (const std::shared_ptr<GraphAllocation>& allocation : plan.freed_foreign) {
    allocation->outstanding_ = false;
    ++allocation->in_flight_;
  }
  return CUDA_SUCCESS;
}

void GraphMemory::end_launch(const GraphMemoryPlan& plan) {
  std::lock_guard lock(mutex_);
  for (const std::shared_ptr<GraphAllocation>& allocation : plan.allocated)
    --allocation->in_flight_;
  for (const std::shared_ptr<GraphAllocation>& allocation : plan.freed_foreign)
    --allocation->in_flight_;
  release_unused_locked();
}

CUresult GraphMemory::free_now(const std::shared_ptr<GraphAllocation>& allocation) {
  std::lock_guard lock(mutex_);
  // Never allocated, freed already, or freed by its own graph: not the caller's to free.
  if (!allocation->outstanding_) return CUDA_ERROR_INVALID_VALUE;
  allocation->outstanding_ = false;
  release_unused_locked();
  return CUDA_SUCCESS;
}

CUresult GraphMemory::begin_free_async(const std::shared_ptr<GraphAllocation>& allocation) {
  std::lock_guard lock(mutex_);
  if (!allocation->outstanding_) return CUDA_ERROR_INVALID_VALUE;
  allocation->outstanding_ = false;
  ++allocation->in_flight_;  // stream work before the free may still use it
  return CUDA_SUCCESS;
}

void GraphMemory::end_free_async(const std::shared_ptr<GraphAllocation>& allocation) {
  std::lock_guard lock(mutex_);
  --allocation->in_flight_;
  release_unused_locked();
}

void GraphMemory::trim(Driver& driver, uint32_t device) {
  std::lock_guard lock(mutex_);
  GraphAllocations idle;
  for (const auto& [base, allocation] : mapped_) {
    if (allocation->device_ == device && !allocation->outstanding_ && allocation->in_flight_ == 0)
      idle.push_back(allocation);
  }
  for (const std::shared_ptr<GraphAllocation>& allocation : idle) unmap_locked(*allocation);
  Counters& counters = counters_[device];
  driver.memory().uncharge(device, counters.reserved - counters.used);
  counters.reserved = counters.used;
}

CUresult GraphMemory::get_attribute(uint32_t device, CUgraphMem_attribute attribute, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex_);
  const Counters& counters = counters_[device];
  cuuint64_t result = 0;
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      result = counters.used;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      result = counters.used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      result = counters.reserved;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      result = counters.reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  std::memcpy(value, &result, sizeof result);
  return CUDA_SUCCESS;
}

CUresult GraphMemory::set_attribute(uint32_t device, CUgraphMem_attribute attribute,
                                    const void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t reset = 0;
  std::memcpy(&reset, value, sizeof reset);
  if (reset != 0) return CUDA_ERROR_INVALID_VALUE;  // high-water marks may only be reset
  std::lock_guard lock(mutex_);
  Counters& counters = counters_[device];
  switch (attribute) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      counters.used_high = counters.used;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      counters.reserved_high = counters.reserved;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

uint64_t GraphMemory::used(uint32_t device) {
  std::lock_guard lock(mutex_);
  return counters_[device].used;
}

uint64_t GraphMemory::reserved(uint32_t device) {
  std::lock_guard lock(mutex_);
  return counters_[device].reserved;
}

std::shared_ptr<GraphMemory> graph_memory() {
  // One per driver lifetime: after fakecuda_shutdown (which reclaims everything the
  // process had charged) or in a forked child, the next driver starts with a fresh pool.
  static std::mutex mutex;
  static std::shared_ptr<GraphMemory> memory;
  static uint64_t generation = 0;
  std::lock_guard lock(mutex);
  if (!memory || generation != driver_generation()) {
    memory = std::make_shared<GraphMemory>();
    generation = driver_generation();
  }
  return memory;
}

}  // namespace fakecuda
