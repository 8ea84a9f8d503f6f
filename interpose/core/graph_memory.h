// GraphMemory: the charge for CUDA graph memory nodes (cuGraphAddMemAllocNode, and
// cuMemAllocAsync inside a stream capture). Such allocations take no memory when they
// are captured or instantiated: the driver backs them with physical memory from a
// per-device graph memory pool when an executable graph is launched (or uploaded), and
// keeps it reserved for later launches until cuDeviceGraphMemTrim (or the graph's
// destruction) gives it back. So the tenant is charged what the driver reports reserved
// (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), and a launch that would need more than the
// cap allows is refused with CUDA_ERROR_OUT_OF_MEMORY *before* the driver maps anything:
//   before the launch: need = (the exec's allocation bytes) - (reserved - used), the part
//     the pool cannot cover with memory it already holds (nothing for an exec launched
//     since the last trim: it keeps its own memory); reserve `need` in the ledger;
//   after it: the charge becomes max(reserved now, charge before) and the unneeded part
//     of `need` is released (the driver may reuse memory between graphs).
// Cost: nothing for graphs without memory nodes (one relaxed load per graph launch);
// graphs with memory nodes pay two attribute queries per launch under one mutex, which
// also serialises their launches so that the books stay exact.
// Injected: MemoryPolicy (the ledger, the DeviceResolver and the DriverCalls for the
// graph's nodes and the device's graph-memory attributes).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "core/call_ref.h"
#include "core/memory_policy.h"
#include "fracgpu/tenant_segment.h"

namespace fracgpu {

class GraphMemory {
 public:
  explicit GraphMemory(MemoryPolicy& memory) : memory_(memory) {}

  // cuGraphInstantiate*: after a successful instantiation, remembers what the graph's
  // memory nodes allocate.
  CUresult instantiate(CUgraphExec* exec, CUgraph graph, DriverCall call) noexcept;
  // cuGraphExecDestroy, cuDeviceGraphMemTrim: re-measure after the driver call.
  CUresult destroy(CUgraphExec exec, DriverCall call) noexcept;
  CUresult trim(CUdevice ordinal, DriverCall call) noexcept;

  // Around a graph launch or upload (`call` is the real one, or the gated launch).
  template <typename Call>
  CUresult launch(CUgraphExec exec, Call&& call) noexcept {
    if (__builtin_expect(tracked_.load(std::memory_order_relaxed) == 0, 1)) return call();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = execs_.find(exec);
    if (it == execs_.end()) return call();
    const ExecMemory memory = it->second;
    uint64_t precharged = 0;
    if (CUresult rc = charge_before(memory, &precharged); rc != CUDA_SUCCESS) return rc;
    const CUresult rc = call();
    settle_after(memory.device, precharged, rc == CUDA_SUCCESS);
    if (rc == CUDA_SUCCESS) it->second.backed = true;
    return rc;
  }

  // The graph-memory charge of a tenant device (tests and status).
  uint64_t charged(int index) const noexcept;

 private:
  struct ExecMemory {
    TenantDevice device;
    uint64_t bytes = 0;   // sum of the exec's allocation nodes
    bool backed = false;  // launched since the last trim: it reuses its own memory
  };
  struct PoolState {
    bool known = false;
    uint64_t reserved = 0;
    uint64_t used = 0;
  };

  uint64_t allocation_bytes(CUgraph graph, int depth) noexcept;
  PoolState pool_state(CUdevice ordinal) noexcept;
  CUresult charge_before(const ExecMemory& memory, uint64_t* precharged) noexcept;
  void settle_after(const TenantDevice& device, uint64_t precharged, bool launched) noexcept;
  void charge_to(int index, uint64_t target) noexcept;  // under mutex_
  void resync(const TenantDevice& device) noexcept;     // under mutex_

  MemoryPolicy& memory_;
  mutable std::mutex mutex_;
  std::unordered_map<CUgraphExec, ExecMemory> execs_;
  std::array<uint64_t, kMaxDevices> charged_{};  // by tenant device index
  std::atomic<std::size_t> tracked_{0};          // execs_.size(), read without the mutex
};

}  // namespace fracgpu
