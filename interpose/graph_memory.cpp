// Implementation of the graph-memory charge (see graph_memory.h).
#include "graph_memory.h"

#include <vector>

#include "core/shim_log.h"

namespace fracgpu::shim {
namespace {

constexpr int kMaxGraphDepth = 8;  // child graphs nest; deeper nesting is not walked

}  // namespace

GraphMemory& GraphMemory::instance() {
  static GraphMemory* memory = new GraphMemory();  // never destroyed: usable during exit
  return *memory;
}

uint64_t GraphMemory::allocation_bytes(const DriverCalls& calls, CUgraph graph, int depth) noexcept {
  if (calls.cuGraphGetNodes == nullptr || calls.cuGraphNodeGetType == nullptr || depth > kMaxGraphDepth) return 0;
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
      if (calls.cuGraphMemAllocNodeGetParams(nodes[i], &params) == CUDA_SUCCESS) bytes += params.bytesize;
    } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && calls.cuGraphChildGraphNodeGetGraph != nullptr) {
      CUgraph child = nullptr;
      if (calls.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS && child != nullptr)
        bytes += allocation_bytes(calls, child, depth + 1);
    }
  }
  return bytes;
}

GraphMemory::PoolState GraphMemory::pool_state(const DriverCalls& calls, CUdevice ordinal) noexcept {
  PoolState state;
  auto get = calls.cuDeviceGetGraphMemAttribute;
  if (get == nullptr) return state;
  cuuint64_t reserved = 0;
  cuuint64_t used = 0;
  state.known = get(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) == CUDA_SUCCESS &&
                get(ordinal, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used) == CUDA_SUCCESS;
  state.reserved = reserved;
  state.used = used;
  return state;
}

void GraphMemory::instantiated(MemoryPolicy& policy, CUgraphExec exec, CUgraph graph) noexcept {
  const uint64_t bytes = allocation_bytes(policy.driver(), graph, 0);
  if (bytes == 0) return;
  TenantDevice device;
  if (!policy.current_device(&device)) return;  // no context: the launch would fail too
  std::lock_guard<std::mutex> lock(mutex_);
  execs_[exec] = ExecMemory{device, bytes};
  tracked_.store(execs_.size(), std::memory_order_relaxed);
}

// Sets the tenant device's graph-memory charge to `target` (memory the driver holds is
// charged even past the grant: it exists already, and the log says so).
void GraphMemory::charge_to(MemoryPolicy& policy, int index, uint64_t target) noexcept {
  if (index < 0 || index >= static_cast<int>(kMaxDevices)) return;
  uint64_t& charged = charged_[static_cast<std::size_t>(index)];
  if (target < charged) {
    policy.release(index, charged - target);
  } else if (target > charged) {
    MemoryLedger& ledger = policy.session().ledger();
    const uint64_t extra = target - charged;
    if (ledger.try_reserve(static_cast<uint32_t>(index), extra) != ReserveOutcome::kReserved) {
      ledger.force_charge(static_cast<uint32_t>(index), extra);
      FRACGPU_LOG_CAPPED(LogLevel::kWarn, 8, "graph memory put %llu bytes beyond the grant",
                         static_cast<unsigned long long>(extra));
    }
  }
  charged = target;
}

CUresult GraphMemory::charge_before(MemoryPolicy& policy, const ExecMemory& memory, uint64_t* precharged) noexcept {
  const PoolState pool = pool_state(policy.driver(), memory.device.ordinal);
  const std::size_t index = static_cast<std::size_t>(memory.device.index);
  uint64_t headroom = 0;
  if (pool.known) {
    if (memory.device.index >= 0 && pool.reserved > charged_[index]) charge_to(policy, memory.device.index, pool.reserved);
    headroom = pool.reserved - std::min(pool.used, pool.reserved);
  }
  const uint64_t wanted = memory.backed ? 0 : memory.bytes;
  const uint64_t need = wanted > headroom ? wanted - headroom : 0;
  if (need == 0) return CUDA_SUCCESS;
  if (CUresult rc = policy.reserve(memory.device, need, "cuGraphLaunch (graph memory)"); rc != CUDA_SUCCESS) return rc;
  *precharged = need;
  if (memory.device.index >= 0) charged_[index] += need;
  return CUDA_SUCCESS;
}

void GraphMemory::settle_after(MemoryPolicy& policy, const TenantDevice& device, uint64_t precharged,
                               bool launched) noexcept {
  if (device.index < 0) return;
  const uint64_t before = charged_[static_cast<std::size_t>(device.index)] - precharged;
  if (!launched) {
    charge_to(policy, device.index, before);
    return;
  }
  const PoolState pool = pool_state(policy.driver(), device.ordinal);
  if (!pool.known) return;  // keep the pre-charge: never less than the driver may hold
  charge_to(policy, device.index, std::max(pool.reserved, before));
}

void GraphMemory::resync(MemoryPolicy& policy, const TenantDevice& device) noexcept {
  if (device.index < 0) return;
  const PoolState pool = pool_state(policy.driver(), device.ordinal);
  if (pool.known) charge_to(policy, device.index, pool.reserved);
}

void GraphMemory::destroyed(MemoryPolicy& policy, CUgraphExec exec) noexcept {
  if (tracked_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  const TenantDevice device = it->second.device;
  execs_.erase(it);
  tracked_.store(execs_.size(), std::memory_order_relaxed);
  resync(policy, device);
}

void GraphMemory::trimmed(MemoryPolicy& policy, CUdevice ordinal) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const TenantDevice device = policy.device(ordinal);
  for (auto& [exec, memory] : execs_) {
    if (memory.device.ordinal == ordinal) memory.backed = false;  // idle execs lost their memory
  }
  resync(policy, device);
}

uint64_t GraphMemory::charged(int index) const noexcept {
  if (index < 0 || index >= static_cast<int>(kMaxDevices)) return 0;
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
  return charged_[static_cast<std::size_t>(index)];
}

}  // namespace fracgpu::shim
