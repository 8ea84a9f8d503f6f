// CUDA graphs: a graph is an ordered list of nodes, each holding one Operation plus
// its dependencies. Nodes can only depend on nodes that already exist, so insertion
// order is a valid topological order and an instantiated graph simply replays its
// operations in that order on the launch stream. Stream capture builds graphs through
// the same node list (see capture.h).
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <vector>

#include "handle_registry.h"
#include "operations.h"

namespace fakecuda {

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

class Graph : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::Graph;
  Graph() : HandleObject(kKind) {}
  CUgraph handle() { return reinterpret_cast<CUgraph>(this); }

  // Adds a node after checking that every dependency is a node of this graph.
  CUresult add_node(HandleRegistry& handles, Operation op, const CUgraphNode* dependencies,
                    size_t dependency_count, CUgraphNode& out);
  std::vector<CUgraphNode> node_handles();
  std::vector<Operation> operations();
  bool owns(CUgraphNode node);
  // Unregisters all nodes (the graph is being destroyed).
  void forget_nodes(HandleRegistry& handles);

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<GraphNode>> nodes_;
};

class GraphExec : public HandleObject {
 public:
  static constexpr HandleKind kKind = HandleKind::GraphExec;
  explicit GraphExec(std::vector<Operation> ops) : HandleObject(kKind), ops_(std::move(ops)) {}
  CUgraphExec handle() { return reinterpret_cast<CUgraphExec>(this); }

  // Replays the nodes in order on `stream` (or into its capture).
  CUresult launch(Stream& stream);

 private:
  std::vector<Operation> ops_;
};

}  // namespace fakecuda
