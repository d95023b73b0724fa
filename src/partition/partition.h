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

/** A value that crosses between two partitions, or between a partition and ORT's CPU EP: each
 *  costs a host round trip, so the claim report says why every one exists. */
struct Boundary {
  std::string value;
  size_t producer = 0;  ///< node index
  size_t consumer = 0;  ///< node index
  int from = -1;        ///< the producer's cluster, -1 for CPU
  int to = -1;          ///< the consumer's cluster, -1 for CPU
  std::string reason;
};

/** The result of partitioning a graph. */
struct Partitioning {
  std::vector<NodeDecision> decisions;        ///< one per Graph::nodes entry
  std::vector<std::vector<size_t>> clusters;  ///< node indices of each fused cluster, topological
  std::vector<Boundary> boundaries;           ///< one per (value, consumer) that crosses sides
};

/** Claims every node and groups claimed nodes into convex clusters.
 *  A cluster never contains a path that leaves it and comes back, and a node shares a cluster
 *  with the producer of an input it needs as a host value only when that value folds at trace
 *  time (it derives from shapes and constants alone, see HostEval). */
Partitioning PartitionGraph(const Graph& graph, const OpRegistry& registry);

/** Node indices of `graph` in a topological order (Kahn's algorithm over data edges). */
std::vector<size_t> TopologicalOrder(const Graph& graph);

}  // namespace mlx_ep
