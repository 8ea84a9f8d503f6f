// The units of device work that can either run on a stream or be recorded into a
// graph: kernel launches, memsets, copies, host function calls and empty nodes. The
// same value is executed by the executor for a direct submission and for each node of
// a launched graph, so captured and replayed work behaves exactly like direct work.
// Graph-only nodes are values too: memory allocation/free nodes (their memory is
// managed at launch by the graph memory pool, see mem_pool.h), child graphs and
// conditional nodes (expanded when a graph is instantiated, see graph.h).
#pragma once

#include <cuda.h>

#include <memory>
#include <variant>
#include <vector>

#include "kernels.h"

namespace fakecuda {

class Graph;
class GraphAllocation;
class Stream;
struct ConditionalHandleState;
struct WorkScope;

struct KernelLaunch {
  const KernelDef* kernel = nullptr;
  KernelArgs args;
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
};

struct MemsetOp {
  CUdeviceptr dst = 0;
  size_t pitch = 0;  // bytes between rows (== width * element_size for 1D)
  uint32_t value = 0;
  uint32_t element_size = 1;
  size_t width = 0;  // elements per row
  size_t height = 1;
};

struct MemcpyOp {
  uintptr_t dst = 0;
  size_t dst_pitch = 0;
  uintptr_t src = 0;
  size_t src_pitch = 0;
  size_t width = 0;  // bytes per row
  size_t height = 1;
  // Pageable host sources are copied here at submission, as the real driver stages them.
  std::shared_ptr<std::vector<unsigned char>> staging;
};

struct HostCallOp {
  CUhostFn fn = nullptr;
  void* user_data = nullptr;
};

struct EmptyOp {};

// Graph memory allocation node: its range is fixed when the node is created.
struct MemAllocOp {
  std::shared_ptr<GraphAllocation> allocation;
  CUmemPoolProps pool_props{};
  std::shared_ptr<const std::vector<CUmemAccessDesc>> access;  // as given (GetParams)
};

// Graph memory free node (of this graph's or another graph's allocation).
struct MemFreeOp {
  std::shared_ptr<GraphAllocation> allocation;
};

// Child graph node: the node owns `graph` (a clone, or the moved original).
struct ChildGraphOp {
  std::shared_ptr<Graph> graph;
};

// Conditional node (IF / WHILE / SWITCH) with its driver-created body graphs.
struct ConditionalOp {
  std::shared_ptr<ConditionalHandleState> handle;
  CUgraphConditionalNodeType type = CU_GRAPH_COND_TYPE_IF;
  std::vector<std::shared_ptr<Graph>> bodies;
  std::shared_ptr<std::vector<CUgraph>> body_handles;  // the array phGraph_out points to
};

using Operation = std::variant<EmptyOp, KernelLaunch, MemsetOp, MemcpyOp, HostCallOp, MemAllocOp,
                               MemFreeOp, ChildGraphOp, ConditionalOp>;

CUgraphNodeType node_type(const Operation& op);

// Runs on the executor thread.
void execute_operation(const Operation& op, WorkScope& scope);

// Submits to the stream, or adds a node to the capture graph if the stream is capturing.
CUresult submit_operation(Stream& stream, Operation op);

// Simulated duration of moving `bytes` through device memory (1000 GB/s, at least 1 us).
int64_t transfer_time_ns(size_t bytes);
// The same for a copy, slowed to FAKECUDA_COPY_BANDWIDTH where this process sets it.
int64_t copy_time_ns(size_t bytes);

}  // namespace fakecuda
