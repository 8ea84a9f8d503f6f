// Implementation of the graph-memory charge (see graph_memory.h). Runs at instantiation,
// destruction, trim, and around launches of graphs that have memory nodes.
#include "core/graph_memory.h"

#include <vector>

#include "core/shim_log.h"

namespace fracgpu {
namespace {

constexpr int kMaxGraphDepth = 8;  // child graphs nest; deeper nesting is not walked

}  // namespace

uint64_t GraphMemory::allocation_bytes(CUgraph graph, int depth) noexcept {
  const DriverCalls& calls = memory_.driver();
  if (calls.cuGraphGetNodes == nullptr || calls.cuGraphNodeGetType == nullptr ||
      depth > kMaxGraphDepth)
    return 0;
  size_t count = 0;
  if (calls.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return 0;
  std::vector<CUgraphNode> nodes(count);
  if (calls.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return 0;
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < count && i < nodes.size(); ++i) {
    CUgraphNodeType type;
    if (calls.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && calls.cuGraphMemAllocNodeGetParams != nullptr) {
      CUDA_MEM_ALLOC_NODE_PARAMS params{};
      if (calls.cuGraphMemAllocNodeGetParams(nodes[i], &params) == CUDA_SUCCESS)
        bytes += params.bytesize;
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && calls.cuGraphChildGraphNodeGetGraph != nullptr) {
      CUgraph child = nullptr;
      if (calls.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS && child != nullptr)
        bytes += allocation_bytes(child, depth + 1);
    }
  }
  return bytes;
}

GraphMemory::PoolState GraphMemory::pool_state(CUdevice ordinal) noexcept {
  PoolState state;
  auto get = memory_.driver().cuDeviceGetGraphMemAttribute;
  if (get == nullptr) return state;
  cuuint64_t reserved = 0;
  cuuint64_t used = 0;
  state.known = get(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS &&
                get(ordinal, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS;
  state.reserved = reserved;
  state.used = used;
  return state;
}

CUresult GraphMemory::instantiate(CUgraphExec* exec, CUgraph graph, DriverCall call) noexcept {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS || exec == nullptr) return rc;
  const uint64_t bytes = allocation_bytes(graph, 0);
  if (bytes == 0) return rc;
  TenantDevice device;
  if (!memory_.devices().current(&device)) return rc;  // no context: the launch would fail too
  std::lock_guard<std::mutex> lock(mutex_);
  execs_[*exec] = ExecMemory{device, bytes};
  tracked_.store(execs_.size(), std::memory_order_relaxed);
  return rc;
}

// Sets the tenant device's graph-memory charge to `target` (memory the driver holds is
// charged even past the grant: it exists already, and the log says so).
void GraphMemory::charge_to(int index, uint64_t target) noexcept {
  if (index < 0 || index >= static_cast<int>(kMaxDevices)) return;
  uint64_t& charged = charged_[static_cast<std::size_t>(index)];
  if (target < charged) {
    memory_.release(index, charged - target);
  } else if (target > charged && !memory_.charge_existing(index, target - charged)) {
    FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8, "graph memory put %llu bytes beyond the grant",
                       static_cast<unsigned long long>(target - charged));
  }
  charged = target;
}

CUresult GraphMemory::charge_before(const ExecMemory& memory, uint64_t* precharged) noexcept {
  const PoolState pool = pool_state(memory.device.ordinal);
  const std::size_t index = static_cast<std::size_t>(memory.device.index);
  uint64_t headroom = 0;
  if (pool.known) {
    if (memory.device.index >= 0 && pool.reserved > charged_[index])
      charge_to(memory.device.index, pool.reserved);
    headroom = pool.reserved - std::min(pool.used, pool.reserved);
  }
  const uint64_t wanted = memory.backed ? 0 : memory.bytes;
  const uint64_t need = wanted > headroom ? wanted - headroom : 0;
  if (need == 0) return CUDA_SUCCESS;
  if (CUresult rc = memory_.reserve(memory.device, need, "cuGraphLaunch (graph memory)");
      rc != CUDA_SUCCESS)
    return rc;
  *precharged = need;
  if (memory.device.index >= 0) charged_[index] += need;
  return CUDA_SUCCESS;
}

void GraphMemory::settle_after(const TenantDevice& device, uint64_t precharged,
                               bool launched) noexcept {
  if (device.index < 0) return;
  const uint64_t before = charged_[static_cast<std::size_t>(device.index)] - precharged;
  if (!launched) {
    charge_to(device.index, before);
    return;
  }
  const PoolState pool = pool_state(device.ordinal);
  if (!pool.known) return;  // keep the pre-charge: never less than the driver may hold
  charge_to(device.index, std::max(pool.reserved, before));
}

void GraphMemory::resync(const TenantDevice& device) noexcept {
  if (device.index < 0) return;
  const PoolState pool = pool_state(device.ordinal);
  if (pool.known) charge_to(device.index, pool.reserved);
}

CUresult GraphMemory::destroy(CUgraphExec exec, DriverCall call) noexcept {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS || tracked_.load(std::memory_order_relaxed) == 0) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return rc;
  const TenantDevice device = it->second.device;
  execs_.erase(it);
  tracked_.store(execs_.size(), std::memory_order_relaxed);
  resync(device);
  return rc;
}

CUresult GraphMemory::trim(CUdevice ordinal, DriverCall call) noexcept {
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(mutex_);
  const TenantDevice device = memory_.devices().device(ordinal);
  for (auto& [exec, memory] : execs_) {
    if (memory.device.ordinal == ordinal) memory.backed = false;  // idle execs lost their memory
  }
  resync(device);
  return rc;
}

uint64_t GraphMemory::charged(int index) const noexcept {
  if (index < 0 || index >= static_cast<int>(kMaxDevices)) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  return charged_[static_cast<std::size_t>(index)];
}

}  // namespace fracgpu
