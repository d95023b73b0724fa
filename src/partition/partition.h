// Claim and partition: which nodes MLX takes, and how they group into fused clusters.
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/op.h"
#include "ops/registry.h"

namespace mlx_ep {

/** Asks the registry whether MLX can run `node` exactly. Never throws. */
Claim ClaimNode(const Node& node, const Graph& graph, const OpRegistry& registry);

/** The claim decision for one node. */
struct NodeDecision {
  bool claimed = false;
  std::string reason;  ///< why it was declined (empty when claimed)
};

/** The result of partitioning a graph. */
struct Partitioning {
  std::vector<NodeDecision> decisions;        ///< one per Graph::nodes entry
  std::vector<std::vector<size_t>> clusters;  ///< node indices of each fused cluster, topological
};

/** Claims every node and groups claimed nodes into connected, convex clusters.
 *  A cluster never contains a path that leaves it and comes back, and a node never shares a
 *  cluster with the producer of an input it needs as a host value. */
Partitioning PartitionGraph(const Graph& graph, const OpRegistry& registry);

/** Node indices of `graph` in a topological order (Kahn's algorithm over data edges). */
std::vector<size_t> TopologicalOrder(const Graph& graph);

}  // namespace mlx_ep
