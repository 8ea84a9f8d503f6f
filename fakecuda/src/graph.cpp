// Graph construction, instantiation and replay (see graph.h).
#include "graph.h"

#include <algorithm>
#include <unordered_set>

#include "capture.h"
#include "driver.h"
#include "stream.h"
#include "stream_queue.h"

namespace fakecuda {
namespace {

// Deeper nesting than this (child graphs, conditional bodies) is refused at instantiation.
constexpr int kMaxNesting = 64;

std::mutex g_conditional_mutex;
std::unordered_map<CUgraphConditionalHandle, std::weak_ptr<ConditionalHandleState>>
    g_conditional_handles;
CUgraphConditionalHandle g_next_conditional = 0x1000;

// The condition values of the graph launch running on this executor thread.
thread_local std::unordered_map<CUgraphConditionalHandle, uint32_t>* t_condition_values = nullptr;

bool allowed_in_conditional_body(const Operation& op) {
  if (const auto* child = std::get_if<ChildGraphOp>(&op))
    return child->graph->fits_conditional_body();
  return std::holds_alternative<KernelLaunch>(op) || std::holds_alternative<EmptyOp>(op) ||
         std::holds_alternative<MemsetOp>(op) || std::holds_alternative<MemcpyOp>(op) ||
         std::holds_alternative<ConditionalOp>(op);
}

// The graphs a node owns (child graph, conditional bodies).
std::vector<std::shared_ptr<Graph>> owned_graphs(const Operation& op) {
  if (const auto* child = std::get_if<ChildGraphOp>(&op)) return {child->graph};
  if (const auto* conditional = std::get_if<ConditionalOp>(&op)) return conditional->bodies;
  return {};
}

struct CompileState {
  GraphAllocations allocated;
  GraphAllocations freed;
  std::vector<std::shared_ptr<ConditionalHandleState>> handles;
  bool conditionals = false;
};

bool contains(const GraphAllocations& list, const std::shared_ptr<GraphAllocation>& allocation) {
  return std::find(list.begin(), list.end(), allocation) != list.end();
}

CUresult compile(Graph& graph, ExecProgram& out, CompileState& state, int depth) {
  if (depth > kMaxNesting) return CUDA_ERROR_INVALID_VALUE;
  for (Operation& op : graph.operations()) {
    if (auto* child = std::get_if<ChildGraphOp>(&op)) {
      CUresult status = compile(*child->graph, out, state, depth + 1);  // inlined
      if (status != CUDA_SUCCESS) return status;
      continue;
    }
    if (auto* node = std::get_if<ConditionalOp>(&op)) {
      auto conditional = std::make_shared<ExecConditional>();
      conditional->handle = node->handle;
      conditional->type = node->type;
      for (const std::shared_ptr<Graph>& body : node->bodies) {
        CUresult status = compile(*body, conditional->bodies.emplace_back(), state, depth + 1);
        if (status != CUDA_SUCCESS) return status;
      }
      if (std::find(state.handles.begin(), state.handles.end(), node->handle) ==
          state.handles.end())
        state.handles.push_back(node->handle);
      state.conditionals = true;
      out.push_back(ExecStep{EmptyOp{}, std::move(conditional)});
      continue;
    }
    if (auto* alloc = std::get_if<MemAllocOp>(&op)) state.allocated.push_back(alloc->allocation);
    if (auto* free = std::get_if<MemFreeOp>(&op)) {
      if (contains(state.freed, free->allocation)) return CUDA_ERROR_INVALID_VALUE;  // twice
      state.freed.push_back(free->allocation);
    }
    out.push_back(ExecStep{std::move(op), nullptr});
  }
  return CUDA_SUCCESS;
}

}  // namespace

CUresult Graph::add_node(HandleRegistry& handles, Operation op, const CUgraphNode* dependencies,
                         size_t dependency_count, CUgraphNode& out) {
  if (dependency_count != 0 && dependencies == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (conditional_body_ && !allowed_in_conditional_body(op)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> deps(dependencies, dependencies + dependency_count);
  auto node = std::make_shared<GraphNode>(std::move(op), std::move(deps));
  {
    std::lock_guard lock(mutex_);
    for (CUgraphNode dependency : node->dependencies) {
      bool found = std::any_of(nodes_.begin(), nodes_.end(),
                               [dependency](const std::shared_ptr<GraphNode>& candidate) {
                                 return candidate->handle() == dependency;
                               });
      if (!found) return CUDA_ERROR_INVALID_VALUE;
    }
    if (const auto* free = std::get_if<MemFreeOp>(&node->op)) {
      for (const std::shared_ptr<GraphNode>& existing : nodes_) {  // an allocation is freed once
        const auto* other = std::get_if<MemFreeOp>(&existing->op);
        if (other != nullptr && other->allocation == free->allocation)
          return CUDA_ERROR_INVALID_VALUE;
      }
    }
    nodes_.push_back(node);
  }
  handles.add(node);
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
  std::vector<std::shared_ptr<GraphNode>> nodes;
  {
    std::lock_guard lock(mutex_);
    nodes = nodes_;
  }
  for (const std::shared_ptr<GraphNode>& node : nodes) {
    handles.take<GraphNode>(node.get());
    for (const std::shared_ptr<Graph>& owned : owned_graphs(node->op)) {
      handles.take<Graph>(owned.get());
      owned->forget_nodes(handles);
    }
  }
}

std::shared_ptr<Graph> Graph::clone(HandleRegistry& handles) {
  auto copy = std::make_shared<Graph>(conditional_body_);
  copy->set_owned_by_node();
  std::vector<std::shared_ptr<GraphNode>> nodes;
  {
    std::lock_guard lock(mutex_);
    nodes = nodes_;
  }
  std::unordered_map<CUgraphNode, CUgraphNode> renamed;
  for (const std::shared_ptr<GraphNode>& node : nodes) {
    Operation op = node->op;
    if (auto* child = std::get_if<ChildGraphOp>(&op)) child->graph = child->graph->clone(handles);
    std::vector<CUgraphNode> deps;
    for (CUgraphNode dependency : node->dependencies) deps.push_back(renamed[dependency]);
    CUgraphNode added = nullptr;
    copy->add_node(handles, std::move(op), deps.data(), deps.size(), added);
    renamed[node->handle()] = added;
  }
  handles.add(copy);
  return copy;
}

bool Graph::has_memory_nodes() {
  for (const Operation& op : operations()) {
    if (std::holds_alternative<MemAllocOp>(op) || std::holds_alternative<MemFreeOp>(op))
      return true;
    for (const std::shared_ptr<Graph>& owned : owned_graphs(op)) {
      if (owned->has_memory_nodes()) return true;
    }
  }
  return false;
}

bool Graph::has_conditional_nodes() {
  for (const Operation& op : operations()) {
    if (std::holds_alternative<ConditionalOp>(op)) return true;
    for (const std::shared_ptr<Graph>& owned : owned_graphs(op)) {
      if (owned->has_conditional_nodes()) return true;
    }
  }
  return false;
}

bool Graph::fits_conditional_body() {
  for (const Operation& op : operations()) {
    if (!allowed_in_conditional_body(op)) return false;
  }
  return true;
}

std::shared_ptr<ConditionalHandleState> Graph::create_conditional_handle(unsigned default_value,
                                                                         unsigned flags) {
  auto state = std::make_shared<ConditionalHandleState>();
  state->default_value = default_value;
  state->flags = flags;
  {
    std::lock_guard lock(g_conditional_mutex);
    if (g_conditional_handles.size() % 256 == 255) {
      std::erase_if(g_conditional_handles,
                    [](const auto& entry) { return entry.second.expired(); });
    }
    state->id = g_next_conditional++;
    g_conditional_handles[state->id] = state;
  }
  std::lock_guard lock(mutex_);
  conditional_handles_.push_back(state);
  return state;
}

std::shared_ptr<ConditionalHandleState> find_conditional_handle(CUgraphConditionalHandle id) {
  std::lock_guard lock(g_conditional_mutex);
  auto it = g_conditional_handles.find(id);
  return it == g_conditional_handles.end() ? nullptr : it->second.lock();
}

bool set_graph_condition(CUgraphConditionalHandle handle, uint32_t value) {
  if (t_condition_values == nullptr) return false;
  auto it = t_condition_values->find(handle);
  if (it == t_condition_values->end()) return false;
  it->second = value;
  return true;
}

CUresult GraphExec::instantiate(Graph& graph, unsigned long long flags,
                                std::shared_ptr<GraphExec>& out) {
  auto exec = std::make_shared<GraphExec>();
  exec->flags_ = flags;
  CompileState state;
  CUresult status = compile(graph, exec->program_, state, 0);
  if (status != CUDA_SUCCESS) return status;
  // Graphs with memory nodes cannot be launched from the device.
  if ((flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) != 0 &&
      (!state.allocated.empty() || !state.freed.empty())) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  GraphMemoryPlan& plan = exec->memory_;
  plan.allocated = std::move(state.allocated);
  for (const std::shared_ptr<GraphAllocation>& allocation : plan.allocated)
    plan.freed_inside.push_back(contains(state.freed, allocation));
  for (const std::shared_ptr<GraphAllocation>& allocation : state.freed) {
    if (!contains(plan.allocated, allocation)) plan.freed_foreign.push_back(allocation);
  }
  plan.auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
  if (!plan.allocated.empty()) {
    // Only one executable graph at a time may hold a graph's allocations.
    if ((status = graph_memory()->claim(exec.get(), plan.allocated)) != CUDA_SUCCESS) return status;
  }
  exec->handles_ = std::move(state.handles);
  exec->has_conditionals_ = state.conditionals;
  for (const std::shared_ptr<ConditionalHandleState>& handle : exec->handles_)
    exec->values_[handle->id] = handle->default_value;
  out = std::move(exec);
  return CUDA_SUCCESS;
}

CUresult GraphExec::launch(Driver& driver, Stream& stream) {
  if (capture_status(stream) != CU_STREAM_CAPTURE_STATUS_NONE) {
    // Launching a graph inside a capture inlines its nodes into the captured graph;
    // graphs whose behaviour depends on the launch itself cannot be inlined here.
    if (has_conditionals_ || uses_graph_memory()) {
      invalidate_capture(stream);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    for (const ExecStep& step : program_) {
      CUresult status = submit_operation(stream, step.op);
      if (status != CUDA_SUCCESS) return status;
    }
    return CUDA_SUCCESS;
  }
  CUresult sticky = stream.queue().sticky_error();
  if (sticky != CUDA_SUCCESS) return sticky;
  std::shared_ptr<GraphMemory> memory;
  if (uses_graph_memory()) {
    memory = graph_memory();
    CUresult status = memory->begin_launch(driver, memory_);
    if (status != CUDA_SUCCESS) return status;
  }
  // One queue item for the whole graph: nodes run back to back, like a real graph launch.
  auto self = std::static_pointer_cast<GraphExec>(shared_from_this());
  stream.submit([self, memory](WorkScope& scope) {
    self->run(scope);
    if (memory) memory->end_launch(self->memory_);
  });
  return CUDA_SUCCESS;
}

CUresult GraphExec::upload(Driver& driver) {
  if (memory_.allocated.empty()) return CUDA_SUCCESS;
  return graph_memory()->upload(driver, memory_.allocated);
}

void GraphExec::destroy() {
  if (!memory_.allocated.empty()) graph_memory()->disown(this, memory_.allocated);
}

void GraphExec::run(WorkScope& scope) {
  for (const std::shared_ptr<ConditionalHandleState>& handle : handles_) {
    if ((handle->flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0)
      values_[handle->id] = handle->default_value;
  }
  auto* previous = t_condition_values;
  t_condition_values = &values_;
  run_program(program_, scope);
  t_condition_values = previous;
}

void GraphExec::run_program(const ExecProgram& program, WorkScope& scope) {
  for (const ExecStep& step : program) {
    if (!step.conditional) {
      execute_operation(step.op, scope);
      continue;
    }
    const ExecConditional& conditional = *step.conditional;
    const CUgraphConditionalHandle id = conditional.handle->id;
    switch (conditional.type) {
      case CU_GRAPH_COND_TYPE_IF:
        if (values_[id] != 0) {
          run_program(conditional.bodies[0], scope);
        } else if (conditional.bodies.size() > 1) {
          run_program(conditional.bodies[1], scope);  // else branch
        }
        break;
      case CU_GRAPH_COND_TYPE_WHILE:
        // Checked before every iteration; a failed body (sticky error) ends the loop.
        while (values_[id] != 0 && scope.queue.sticky_error() == CUDA_SUCCESS)
          run_program(conditional.bodies[0], scope);
        break;
      case CU_GRAPH_COND_TYPE_SWITCH: {
        uint32_t value = values_[id];
        if (value < conditional.bodies.size()) run_program(conditional.bodies[value], scope);
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace fakecuda
