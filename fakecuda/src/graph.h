// CUDA graphs: a graph is an ordered list of nodes, each holding one Operation plus
// its dependencies. Nodes can only depend on nodes that already exist, so insertion
// order is a valid topological order and an instantiated graph simply replays its
// operations in that order on the launch stream. Stream capture builds graphs through
// the same node list (see capture.h).
//
// Instantiation compiles a graph into a program: child graph nodes are inlined,
// conditional nodes (IF / IF-ELSE / WHILE / SWITCH, CUDA 12.4+) keep their compiled
// bodies and are decided on the device while the launch runs, from the value of their
// conditional handle (reset to its default at every launch with
// CU_GRAPH_COND_ASSIGN_DEFAULT; set by the fracgpu_fake_set_condition and
// fracgpu_fake_countdown_condition kernels, the simulated cudaGraphSetConditional).
// Graph memory nodes are collected into the executable graph's memory plan, which the
// graph memory pool maps at launch (mem_pool.h).
#pragma once

#include <cuda.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "handle_registry.h"
#include "mem_pool.h"
#include "operations.h"

namespace fakecuda {

class Driver;
class Stream;

class GraphNode : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::GraphNode;
  GraphNode(Operation operation, std::vector<CUgraphNode> depends_on)
      : HandleObject(kKind), op(std::move(operation)), dependencies(std::move(depends_on)) {}
  CUgraphNode handle() { return reinterpret_cast<CUgraphNode>(this); }

  Operation op;
  std::vector<CUgraphNode> dependencies;
};

// A conditional handle (cuGraphConditionalHandleCreate); the graph it was created for
// keeps it alive.
struct ConditionalHandleState {
  CUgraphConditionalHandle id = 0;
  unsigned default_value = 0;
  unsigned flags = 0;  // CU_GRAPH_COND_ASSIGN_DEFAULT or 0
};

class Graph : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Graph;
  // A conditional body accepts only kernel, empty, memset, memcpy, child graph and
  // conditional nodes (the real driver's rule).
  explicit Graph(bool conditional_body = false)
      : HandleObject(kKind), conditional_body_(conditional_body) {}
  CUgraph handle() { return reinterpret_cast<CUgraph>(this); }

  // Adds a node after checking that every dependency is a node of this graph and that
  // the node is allowed here (conditional bodies; one free node per allocation).
  CUresult add_node(HandleRegistry& handles, Operation op, const CUgraphNode* dependencies,
                    size_t dependency_count, CUgraphNode& out);
  std::vector<CUgraphNode> node_handles();
  std::vector<Operation> operations();
  bool owns(CUgraphNode node);
  // Unregisters all nodes, and the graphs the nodes own (the graph is being destroyed).
  void forget_nodes(HandleRegistry& handles);

  // A deep copy (nodes, child graphs) registered in `handles`; for cuGraphAddChildGraphNode.
  std::shared_ptr<Graph> clone(HandleRegistry& handles);
  // Recursively (child graphs, conditional bodies): memory nodes / conditional nodes /
  // nodes a conditional body may not hold.
  bool has_memory_nodes();
  bool has_conditional_nodes();
  bool fits_conditional_body();

  std::shared_ptr<ConditionalHandleState> create_conditional_handle(unsigned default_value,
                                                                    unsigned flags);

  bool conditional_body() const { return conditional_body_; }
  // Body graphs of conditional nodes and moved child graphs belong to their node:
  // cuGraphDestroy refuses them, the owning graph's destruction destroys them.
  bool owned_by_node() const { return owned_by_node_.load(); }
  void set_owned_by_node() { owned_by_node_.store(true); }

 private:
  const bool conditional_body_;
  std::atomic<bool> owned_by_node_{false};
  std::mutex mutex_;
  std::vector<std::shared_ptr<GraphNode>> nodes_;
  std::vector<std::shared_ptr<ConditionalHandleState>> conditional_handles_;
};

// The live conditional handle with this value, or null.
std::shared_ptr<ConditionalHandleState> find_conditional_handle(CUgraphConditionalHandle id);

// Device side of cudaGraphSetConditional (executor thread): sets `handle`'s value in the
// graph launch running on this thread; false if that launch does not use the handle.
bool set_graph_condition(CUgraphConditionalHandle handle, uint32_t value);

struct ExecConditional;

// One step of an instantiated graph: an operation, or a conditional node.
struct ExecStep {
  Operation op;
  std::shared_ptr<const ExecConditional> conditional;
};
using ExecProgram = std::vector<ExecStep>;

struct ExecConditional {
  std::shared_ptr<ConditionalHandleState> handle;
  CUgraphConditionalNodeType type = CU_GRAPH_COND_TYPE_IF;
  std::vector<ExecProgram> bodies;
};

class GraphExec : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::GraphExec;
  GraphExec() : HandleObject(kKind) {}
  CUgraphExec handle() { return reinterpret_cast<CUgraphExec>(this); }

  // Compiles a snapshot of `graph`, like the real driver (later edits of the graph do
  // not change the executable graph). CUDA_ERROR_INVALID_VALUE when the graph's memory
  // nodes already belong to another executable graph, or for flags the graph forbids.
  static CUresult instantiate(Graph& graph, unsigned long long flags,
                              std::shared_ptr<GraphExec>& out);

  // Replays the program on `stream` (or inlines it into the stream's capture).
  CUresult launch(Driver& driver, Stream& stream);
  // cuGraphUpload: maps the graph's memory now rather than at the first launch.
  CUresult upload(Driver& driver);
  // cuGraphExecDestroy: gives the graph's memory back to the pool (launches still in
  // flight keep what they use until they finish).
  void destroy();

  unsigned long long flags() const { return flags_; }
  bool uses_graph_memory() const { return !memory_.empty(); }

 private:
  void run(WorkScope& scope);
  void run_program(const ExecProgram& program, WorkScope& scope);

  ExecProgram program_;
  bool has_conditionals_ = false;
  GraphMemoryPlan memory_;
  std::vector<std::shared_ptr<ConditionalHandleState>> handles_;
  std::unordered_map<CUgraphConditionalHandle, uint32_t> values_;  // executor thread only
  unsigned long long flags_ = 0;
};

}  // namespace fakecuda
