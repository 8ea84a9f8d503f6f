// Graph entry points: building graphs explicitly (kernel, memset, host and empty
// nodes), inspecting them, instantiating and launching them. Graphs built by stream
// capture use the same Graph objects (capture.cpp).
#include <cstring>

#include "api_support.h"
#include "graph.h"
#include "module.h"
#include "stream.h"

using namespace fakecuda;

namespace {

template <typename Body>
CUresult with_graph(CUgraph handle, Body&& body) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Graph> graph = driver.handles.get<Graph>(handle);
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    return body(driver, *graph);
  });
}

CUresult add_node(CUgraphNode* out, CUgraph hGraph, const CUgraphNode* deps, size_t count,
                  Operation op) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    return graph.add_node(driver.handles, std::move(op), deps, count, *out);
  });
}

// Builds a KernelLaunch from node parameters; kernel arguments are copied now.
CUresult kernel_op(CUfunction func, const unsigned grid[3], const unsigned block[3],
                   unsigned shared, void** params, void** extra, KernelLaunch& op) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Function> function = driver.handles.get<Function>(func);
    if (!function) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < 3; ++i) {
      if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
      op.grid[i] = grid[i];
      op.block[i] = block[i];
    }
    op.kernel = function->kernel;
    op.function = func;
    op.shared_bytes = shared;
    return gather_kernel_args(*function->kernel, params, extra, op.args);
  });
}

template <typename Params>
CUresult add_kernel_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                         const Params* p, CUfunction func) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  KernelLaunch op;
  CUresult status = kernel_op(func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra, op);
  if (status != CUDA_SUCCESS) return status;
  return add_node(out, graph, deps, count, op);
}

CUresult instantiate(CUgraphExec* exec_out, CUgraph hGraph) {
  if (exec_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    auto exec =
        std::make_shared<GraphExec>(graph.operations());  // a snapshot, like the real driver
    driver.handles.add(exec);
    *exec_out = exec->handle();
    return CUDA_SUCCESS;
  });
}

CUresult launch(CUgraphExec hGraphExec, CUstream hStream) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<GraphExec> exec = driver.handles.get<GraphExec>(hGraphExec);
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<Stream> stream;
    CUresult status = resolve_stream(hStream, stream);
    if (status != CUDA_SUCCESS) return status;
    return exec->launch(*stream);
  });
}

CUresult upload(CUgraphExec hGraphExec, CUstream hStream) {
  return with_driver([&](Driver& driver) {
    if (!driver.handles.get<GraphExec>(hGraphExec)) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<Stream> stream;
    return resolve_stream(hStream, stream);  // nothing to upload: graphs live on the host
  });
}

}  // namespace

extern "C" CUresult fakecuda_impl_cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    auto graph = std::make_shared<Graph>();
    driver.handles.add(graph);
    *phGraph = graph->handle();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphDestroy(CUgraph hGraph) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<Graph> graph = driver.handles.take<Graph>(hGraph);
    if (!graph) return CUDA_ERROR_INVALID_VALUE;
    graph->forget_nodes(driver.handles);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphAddKernelNode(
    CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
    size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams,
                         nodeParams->func);
}

extern "C" CUresult fakecuda_impl_cuGraphAddKernelNode_v2(
    CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
    size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunction func = nodeParams->func != nullptr ? nodeParams->func
                                                : reinterpret_cast<CUfunction>(nodeParams->kern);
  return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, func);
}

extern "C" CUresult fakecuda_impl_cuGraphAddMemsetNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                       const CUgraphNode* dependencies,
                                                       size_t numDependencies,
                                                       const CUDA_MEMSET_NODE_PARAMS* memsetParams,
                                                       CUcontext) {
  if (memsetParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned element = memsetParams->elementSize;
  if ((element != 1 && element != 2 && element != 4) || memsetParams->dst == 0 ||
      memsetParams->width == 0 || memsetParams->height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  MemsetOp op;
  op.dst = memsetParams->dst;
  op.element_size = element;
  op.value = memsetParams->value;
  op.width = memsetParams->width;
  op.height = memsetParams->height;
  op.pitch = op.height > 1 ? memsetParams->pitch : op.width * element;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, op);
}

extern "C" CUresult fakecuda_impl_cuGraphAddEmptyNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                      const CUgraphNode* dependencies,
                                                      size_t numDependencies) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, EmptyOp{});
}

extern "C" CUresult fakecuda_impl_cuGraphAddHostNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                     const CUgraphNode* dependencies,
                                                     size_t numDependencies,
                                                     const CUDA_HOST_NODE_PARAMS* nodeParams) {
  if (nodeParams == nullptr || nodeParams->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_node(phGraphNode, hGraph, dependencies, numDependencies,
                  HostCallOp{nodeParams->fn, nodeParams->userData});
}

extern "C" CUresult fakecuda_impl_cuGraphGetNodes(CUgraph hGraph, CUgraphNode* nodes,
                                                  size_t* numNodes) {
  if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver&, Graph& graph) {
    std::vector<CUgraphNode> all = graph.node_handles();
    if (nodes != nullptr) {
      for (size_t i = 0; i < *numNodes; ++i) nodes[i] = i < all.size() ? all[i] : nullptr;
      *numNodes = std::min(*numNodes, all.size());
    } else {
      *numNodes = all.size();
    }
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<GraphNode> node = driver.handles.get<GraphNode>(hNode);
    if (!node) return CUDA_ERROR_INVALID_VALUE;
    *type = node_type(node->op);
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                     CUgraphNode* phErrorNode, char* logBuffer,
                                                     size_t bufferSize) {
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return instantiate(phGraphExec, hGraph);
}

extern "C" CUresult fakecuda_impl_cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                        CUgraphNode* phErrorNode, char* logBuffer,
                                                        size_t bufferSize) {
  return fakecuda_impl_cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

extern "C" CUresult fakecuda_impl_cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec,
                                                              CUgraph hGraph,
                                                              unsigned long long flags) {
  constexpr unsigned long long kKnownFlags =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if ((flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  return instantiate(phGraphExec, hGraph);
}

extern "C" CUresult fakecuda_impl_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream);
}
extern "C" CUresult fakecuda_impl_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return launch(hGraphExec, hStream);
}

extern "C" CUresult fakecuda_impl_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return with_driver([&](Driver& driver) {
    // A launch still in flight keeps its own reference to the executable graph.
    return driver.handles.take<GraphExec>(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return upload(hGraphExec, hStream);
}
extern "C" CUresult fakecuda_impl_cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return upload(hGraphExec, hStream);
}
