// Graph construction and replay (see graph.h).
#include "graph.h"

#include <algorithm>

#include "capture.h"
#include "stream.h"
#include "stream_queue.h"

namespace fakecuda {

CUresult Graph::add_node(HandleRegistry& handles, Operation op, const CUgraphNode* dependencies,
                         size_t dependency_count, CUgraphNode& out) {
  if (dependency_count != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> deps(dependencies, dependencies + dependency_count);
  for (CUgraphNode dependency : deps) {
    if (!owns(dependency)) return CUDA_ERROR_INVALID_VALUE;
  }
  auto node = std::make_shared<GraphNode>(std::move(op), std::move(deps));
  handles.add(node);
  std::lock_guard lock(mutex_);
  nodes_.push_back(node);
  out = node->handle();
  return CUDA_SUCCESS;
}

bool Graph::owns(CUgraphNode node) {
  std::lock_guard lock(mutex_);
  return std::any_of(
      nodes_.begin(), nodes_.end(),
      [node](const std::shared_ptr<GraphNode>& candidate) { return candidate->handle() == node; });
}

std::vector<CUgraphNode> Graph::node_handles() {
  std::lock_guard lock(mutex_);
  std::vector<CUgraphNode> handles;
  for (const std::shared_ptr<GraphNode>& node : nodes_) handles.push_back(node->handle());
  return handles;
}

std::vector<Operation> Graph::operations() {
  std::lock_guard lock(mutex_);
  std::vector<Operation> ops;
  for (const std::shared_ptr<GraphNode>& node : nodes_) ops.push_back(node->op);
  return ops;
}

void Graph::forget_nodes(HandleRegistry& handles) {
  std::lock_guard lock(mutex_);
  for (const std::shared_ptr<GraphNode>& node : nodes_) handles.take<GraphNode>(node.get());
}

CUresult GraphExec::launch(Stream& stream) {
  if (capture_status(stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
    // Launching a graph inside a capture inlines its nodes into the captured graph.
    for (const Operation& op : ops_) {
      CUresult status = submit_operation(stream, op);
      if (status != CUDA_SUCCESS) return status;
    }
    return CUDA_SUCCESS;
  }
  CUresult sticky = stream.queue().sticky_error();
  if (sticky != CUDA_SUCCESS) return sticky;
  // One queue item for the whole graph: nodes run back to back, like a real graph launch.
  std::shared_ptr<HandleObject> keep_alive = shared_from_this();
  stream.submit([this, keep_alive](WorkScope& scope) {
    for (const Operation& op : ops_) execute_operation(op, scope);
  });
  return CUDA_SUCCESS;
}

}  // namespace fakecuda
