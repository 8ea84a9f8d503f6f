// Graph entry points: building graphs explicitly (kernel, memset, host, empty, child
// graph, memory allocation/free and conditional nodes, through the typed calls or the
// generic cuGraphAddNode), inspecting them, conditional handles, instantiating and
// launching them. Graphs built by stream capture use the same Graph objects
// (capture.cpp); graph memory is managed by the graph memory pool (mem_pool.h).
#include <cstring>

#include "api_support.h"
#include "capture.h"
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

constexpr unsigned long long kKnownInstantiateFlags =
    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
    CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;

CUresult instantiate(CUgraphExec* exec_out, CUgraph hGraph, unsigned long long flags) {
  if (exec_out == nullptr || (flags & ~kKnownInstantiateFlags) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  constexpr unsigned long long kExclusive =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
  if ((flags & kExclusive) == kExclusive) return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    std::shared_ptr<GraphExec> exec;
    CUresult status = GraphExec::instantiate(graph, flags, exec);  // a snapshot
    if (status != CUDA_SUCCESS) return status;
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
    return exec->launch(driver, *stream);
  });
}

CUresult upload_exec(Driver& driver, GraphExec& exec, CUstream hStream) {
  std::shared_ptr<Stream> stream;
  CUresult status = resolve_stream(hStream, stream);
  if (status != CUDA_SUCCESS) return status;
  return exec.upload(driver);  // maps the graph's memory; the nodes live on the host
}

CUresult upload(CUgraphExec hGraphExec, CUstream hStream) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<GraphExec> exec = driver.handles.get<GraphExec>(hGraphExec);
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    return upload_exec(driver, *exec, hStream);
  });
}

CUresult instantiate_with_params(CUgraphExec* phGraphExec, CUgraph hGraph,
                                 CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  params->hErrNode_out = nullptr;
  CUresult status = instantiate(phGraphExec, hGraph, params->flags);
  if (status == CUDA_SUCCESS && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) != 0) {
    status = with_driver([&](Driver& driver) {
      std::shared_ptr<GraphExec> exec = driver.handles.get<GraphExec>(*phGraphExec);
      return exec ? upload_exec(driver, *exec, params->hUploadStream) : CUDA_ERROR_INVALID_VALUE;
    });
    if (status != CUDA_SUCCESS) {
      with_driver([&](Driver& driver) {
        if (std::shared_ptr<GraphExec> exec = driver.handles.take<GraphExec>(*phGraphExec))
          exec->destroy();
        return CUDA_SUCCESS;
      });
      *phGraphExec = nullptr;
    }
  }
  params->result_out =
      status == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return status;
}

// --- memory, child graph and conditional nodes ---

CUresult mem_alloc_op(Driver& driver, const CUmemPoolProps& props, const CUmemAccessDesc* access,
                      size_t access_count, size_t bytes, MemAllocOp& op) {
  if (bytes == 0 || props.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !driver.valid_device(props.location.id) || props.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
      access_count > driver.device_count() || (access_count != 0 && access == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;  // graph allocations are device memory, never IPC
  }
  op.allocation = graph_memory()->create(driver, driver.physical(props.location.id),
                                         top_current_context(), bytes);
  if (!op.allocation) return CUDA_ERROR_OUT_OF_MEMORY;
  op.pool_props = props;
  op.access = std::make_shared<const std::vector<CUmemAccessDesc>>(access, access + access_count);
  return CUDA_SUCCESS;
}

template <typename Params>
CUresult add_mem_alloc_node(CUgraphNode* out, CUgraph hGraph, const CUgraphNode* deps, size_t count,
                            Params* params) {
  if (params == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    MemAllocOp op;
    CUresult status = mem_alloc_op(driver, params->poolProps, params->accessDescs,
                                   params->accessDescCount, params->bytesize, op);
    if (status != CUDA_SUCCESS) return status;
    CUdeviceptr address = op.allocation->base();
    status = graph.add_node(driver.handles, std::move(op), deps, count, *out);
    if (status == CUDA_SUCCESS) params->dptr = address;  // fixed for the node's lifetime
    return status;
  });
}

CUresult add_mem_free_node(CUgraphNode* out, CUgraph hGraph, const CUgraphNode* deps, size_t count,
                           CUdeviceptr dptr) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    std::shared_ptr<GraphAllocation> allocation = graph_memory()->find(dptr);
    if (!allocation) return CUDA_ERROR_INVALID_VALUE;  // not an allocation node's address
    return graph.add_node(driver.handles, MemFreeOp{allocation}, deps, count, *out);
  });
}

CUresult add_child_graph_node(CUgraphNode* out, CUgraph hGraph, const CUgraphNode* deps,
                              size_t count, CUgraph hChild,
                              CUgraphChildGraphNodeOwnership ownership) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE &&
      ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    std::shared_ptr<Graph> child = driver.handles.get<Graph>(hChild);
    if (!child || child.get() == &graph || child->owned_by_node()) return CUDA_ERROR_INVALID_VALUE;
    // Conditional nodes cannot be in a child graph; memory nodes only in a moved one
    // (a graph with memory nodes cannot be cloned).
    if (child->has_conditional_nodes()) return CUDA_ERROR_INVALID_VALUE;
    std::shared_ptr<Graph> owned;
    if (ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
      if (child->has_memory_nodes()) return CUDA_ERROR_INVALID_VALUE;
      owned = child->clone(driver.handles);
    } else {
      owned = child;
    }
    CUresult status = graph.add_node(driver.handles, ChildGraphOp{owned}, deps, count, *out);
    if (status != CUDA_SUCCESS) {
      if (ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE) {
        driver.handles.take<Graph>(owned.get());
        owned->forget_nodes(driver.handles);
      }
      return status;
    }
    owned->set_owned_by_node();
    return CUDA_SUCCESS;
  });
}

CUresult add_conditional_node(CUgraphNode* out, CUgraph hGraph, const CUgraphNode* deps,
                              size_t count, CUDA_CONDITIONAL_NODE_PARAMS& params) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (params.type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (params.size != 1 && params.size != 2) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_GRAPH_COND_TYPE_WHILE:
      if (params.size != 1) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_GRAPH_COND_TYPE_SWITCH:
      if (params.size == 0) return CUDA_ERROR_INVALID_VALUE;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    if (params.ctx != nullptr && !driver.handles.get<Context>(params.ctx))
      return CUDA_ERROR_INVALID_CONTEXT;
    ConditionalOp op;
    op.handle = find_conditional_handle(params.handle);
    if (!op.handle) return CUDA_ERROR_INVALID_VALUE;
    op.type = params.type;
    op.body_handles = std::make_shared<std::vector<CUgraph>>();
    for (unsigned i = 0; i < params.size; ++i) {
      auto body = std::make_shared<Graph>(true);  // created and owned by the node
      body->set_owned_by_node();
      driver.handles.add(body);
      op.bodies.push_back(body);
      op.body_handles->push_back(body->handle());
    }
    std::vector<std::shared_ptr<Graph>> bodies = op.bodies;
    std::shared_ptr<std::vector<CUgraph>> body_handles = op.body_handles;
    CUresult status = graph.add_node(driver.handles, std::move(op), deps, count, *out);
    if (status != CUDA_SUCCESS) {
      for (const std::shared_ptr<Graph>& body : bodies) driver.handles.take<Graph>(body.get());
      return status;
    }
    params.phGraph_out = body_handles->data();  // valid for the node's lifetime
    return CUDA_SUCCESS;
  });
}

bool default_edges(const CUgraphEdgeData* edges, size_t count) {
  if (edges == nullptr) return true;
  for (size_t i = 0; i < count; ++i) {
    if (edges[i].from_port != 0 || edges[i].to_port != 0 ||
        edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT) {
      return false;
    }
  }
  return true;
}

CUresult memset_op(const CUdeviceptr dst, size_t pitch, unsigned value, unsigned element,
                   size_t width, size_t height, MemsetOp& op) {
  if ((element != 1 && element != 2 && element != 4) || dst == 0 || width == 0 || height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  op.dst = dst;
  op.element_size = element;
  op.value = value;
  op.width = width;
  op.height = height;
  op.pitch = op.height > 1 ? pitch : op.width * element;
  return CUDA_SUCCESS;
}

// cuGraphAddNode: the generic node API of CUDA 12.
CUresult add_generic_node(CUgraphNode* out, CUgraph hGraph, const CUgraphNode* deps,
                          const CUgraphEdgeData* edges, size_t count, CUgraphNodeParams* params) {
  if (params == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!default_edges(edges, count)) return CUDA_ERROR_NOT_SUPPORTED;  // only full dependencies
  switch (params->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& p = params->kernel;
      CUfunction func = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
      return add_kernel_node(out, hGraph, deps, count, &p, func);
    }
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& p = params->memset;
      MemsetOp op;
      CUresult status = memset_op(p.dst, p.pitch, p.value, p.elementSize, p.width, p.height, op);
      if (status != CUDA_SUCCESS) return status;
      return add_node(out, hGraph, deps, count, op);
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      if (params->host.fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
      return add_node(out, hGraph, deps, count, HostCallOp{params->host.fn, params->host.userData});
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return add_node(out, hGraph, deps, count, EmptyOp{});
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return add_child_graph_node(out, hGraph, deps, count, params->graph.graph,
                                  params->graph.ownership);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      return add_mem_alloc_node(out, hGraph, deps, count, &params->alloc);
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return add_mem_free_node(out, hGraph, deps, count, params->free.dptr);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return add_conditional_node(out, hGraph, deps, count, params->conditional);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;  // memcpy, event, semaphore and mem-op nodes
  }
}

template <typename Body>
CUresult with_node(CUgraphNode hNode, Body&& body) {
  return with_driver([&](Driver& driver) {
    std::shared_ptr<GraphNode> node = driver.handles.get<GraphNode>(hNode);
    if (!node) return CUDA_ERROR_INVALID_VALUE;
    return body(driver, *node);
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
    std::shared_ptr<Graph> found = driver.handles.get<Graph>(hGraph);
    // Conditional bodies and child graphs are destroyed with the graph that owns them.
    if (!found || found->owned_by_node()) return CUDA_ERROR_INVALID_VALUE;
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
  const CUDA_MEMSET_NODE_PARAMS& p = *memsetParams;
  MemsetOp op;
  CUresult status = memset_op(p.dst, p.pitch, p.value, p.elementSize, p.width, p.height, op);
  if (status != CUDA_SUCCESS) return status;
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
  return instantiate(phGraphExec, hGraph, 0);
}

extern "C" CUresult fakecuda_impl_cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                        CUgraphNode* phErrorNode, char* logBuffer,
                                                        size_t bufferSize) {
  return fakecuda_impl_cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

extern "C" CUresult fakecuda_impl_cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec,
                                                              CUgraph hGraph,
                                                              unsigned long long flags) {
  return instantiate(phGraphExec, hGraph, flags);
}

extern "C" CUresult fakecuda_impl_cuGraphInstantiateWithParams(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate_with_params(phGraphExec, hGraph, instantiateParams);
}
extern "C" CUresult fakecuda_impl_cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams) {
  return instantiate_with_params(phGraphExec, hGraph, instantiateParams);
}

extern "C" CUresult fakecuda_impl_cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_driver([&](Driver& driver) {
    std::shared_ptr<GraphExec> exec = driver.handles.get<GraphExec>(hGraphExec);
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    *flags = exec->flags();
    return CUDA_SUCCESS;
  });
}

// The legacy stream while a blocking stream captures is refused (and invalidates that
// capture) like any other use of it (capture.h).
extern "C" CUresult fakecuda_impl_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  if (CUresult legacy = check_stream_use(hStream); legacy != CUDA_SUCCESS) return legacy;
  return launch(hGraphExec, hStream);
}
extern "C" CUresult fakecuda_impl_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  if (CUresult legacy = check_stream_use(per_thread_handle(hStream)); legacy != CUDA_SUCCESS)
    return legacy;
  return launch(hGraphExec, hStream);
}

extern "C" CUresult fakecuda_impl_cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return with_driver([&](Driver& driver) {
    // A launch still in flight keeps its own reference to the executable graph.
    std::shared_ptr<GraphExec> exec = driver.handles.take<GraphExec>(hGraphExec);
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    exec->destroy();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return upload(hGraphExec, hStream);
}
extern "C" CUresult fakecuda_impl_cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return upload(hGraphExec, hStream);
}

extern "C" CUresult fakecuda_impl_cuGraphAddChildGraphNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                           const CUgraphNode* dependencies,
                                                           size_t numDependencies,
                                                           CUgraph childGraph) {
  return add_child_graph_node(phGraphNode, hGraph, dependencies, numDependencies, childGraph,
                              CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE);
}

extern "C" CUresult fakecuda_impl_cuGraphChildGraphNodeGetGraph(CUgraphNode hNode,
                                                                CUgraph* phGraph) {
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, [&](Driver&, GraphNode& node) {
    const auto* child = std::get_if<ChildGraphOp>(&node.op);
    if (child == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *phGraph = child->graph->handle();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                         const CUgraphNode* dependencies,
                                                         size_t numDependencies,
                                                         CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  return add_mem_alloc_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

extern "C" CUresult fakecuda_impl_cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                        const CUgraphNode* dependencies,
                                                        size_t numDependencies, CUdeviceptr dptr) {
  return add_mem_free_node(phGraphNode, hGraph, dependencies, numDependencies, dptr);
}

extern "C" CUresult fakecuda_impl_cuGraphMemAllocNodeGetParams(
    CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  if (params_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, [&](Driver&, GraphNode& node) {
    const auto* alloc = std::get_if<MemAllocOp>(&node.op);
    if (alloc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    params_out->poolProps = alloc->pool_props;
    params_out->accessDescs = alloc->access->empty() ? nullptr : alloc->access->data();
    params_out->accessDescCount = alloc->access->size();
    params_out->bytesize = alloc->allocation->size();
    params_out->dptr = alloc->allocation->base();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphMemFreeNodeGetParams(CUgraphNode hNode,
                                                              CUdeviceptr* dptr_out) {
  if (dptr_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return with_node(hNode, [&](Driver&, GraphNode& node) {
    const auto* free = std::get_if<MemFreeOp>(&node.op);
    if (free == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *dptr_out = free->allocation->base();
    return CUDA_SUCCESS;
  });
}

extern "C" CUresult fakecuda_impl_cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                 const CUgraphNode* dependencies,
                                                 size_t numDependencies,
                                                 CUgraphNodeParams* nodeParams) {
  return add_generic_node(phGraphNode, hGraph, dependencies, nullptr, numDependencies, nodeParams);
}

extern "C" CUresult fakecuda_impl_cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph,
                                                    const CUgraphNode* dependencies,
                                                    const CUgraphEdgeData* dependencyData,
                                                    size_t numDependencies,
                                                    CUgraphNodeParams* nodeParams) {
  return add_generic_node(phGraphNode, hGraph, dependencies, dependencyData, numDependencies,
                          nodeParams);
}

extern "C" CUresult fakecuda_impl_cuGraphConditionalHandleCreate(
    CUgraphConditionalHandle* pHandle_out, CUgraph hGraph, CUcontext ctx,
    unsigned int defaultLaunchValue, unsigned int flags) {
  if (pHandle_out == nullptr || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return with_graph(hGraph, [&](Driver& driver, Graph& graph) {
    if (ctx != nullptr && !driver.handles.get<Context>(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *pHandle_out = graph.create_conditional_handle(defaultLaunchValue, flags)->id;
    return CUDA_SUCCESS;
  });
}
