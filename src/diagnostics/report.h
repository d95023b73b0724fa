// The claim report: per graph, which nodes MLX took, in which partitions, and why the others
// were declined; plus each partition's run counters. Printed (ONNXRUNTIME_EP_MLX_VERBOSE,
// ONNXRUNTIME_EP_MLX_CLAIM_DEBUG) and written as JSON (ONNXRUNTIME_EP_MLX_REPORT).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "partition/partition.h"
#include "runtime/runner.h"

struct OrtLogger;  // ORT's C type (common/log.h)

namespace mlx_ep {

/** Collects what one EP instance (one session) claimed and ran. Thread-safe. */
class SessionReport {
 public:
  /** Records the claim decisions for a graph. ORT may ask again for the same graph (after it
   *  expanded function ops nobody claimed, say): the later pass replaces the entry, the nodes of
   *  domain `fused_domain` (this EP's partitions of the earlier passes) count as
   *  `partitions_from_earlier_passes`, and what the earlier passes declined is kept as
   *  `declined_in_earlier_passes`: the reason the graph is split is often there. */
  void AddGraph(const Graph& graph, const Partitioning& partitioning, const std::string& fused_domain);
  /** Records a compiled partition so its counters appear in the report. */
  void AddRunner(std::shared_ptr<const PartitionRunner> runner);
  /** The report as JSON text. */
  std::string ToJson() const;
  /** One-line-per-partition summary for ONNXRUNTIME_EP_MLX_VERBOSE. */
  std::string Summary() const;

 private:
  struct Declined {
    std::string node, op_type, domain, reason;
  };
  struct BoundaryEntry {
    std::string value, producer, consumer, reason;
    int from = -1, to = -1;
  };
  struct GraphEntry {
    std::string name;
    size_t nodes_total = 0;
    size_t nodes_claimed = 0;
    std::vector<std::vector<std::pair<std::string, std::string>>> clusters;  // (name, op_type)
    std::vector<Declined> declined;
    std::vector<BoundaryEntry> boundaries;
    size_t passes = 1;                          // GetCapability calls for this graph
    size_t earlier_partitions = 0;              // this EP's fused nodes the last pass saw
    std::vector<Declined> declined_earlier;     // declined by the earlier passes
  };

  mutable std::mutex mu_;
  std::vector<GraphEntry> graphs_;
  std::vector<std::shared_ptr<const PartitionRunner>> runners_;
};

/** Logs the GetCapability diagnostics: through ORT's `logger` (the session's) at the levels it
 *  emits (the claim summary INFO, each declined node and boundary VERBOSE), and on stderr those
 *  the environment asks for (ONNXRUNTIME_EP_MLX_VERBOSE, ONNXRUNTIME_EP_MLX_CLAIM_DEBUG). */
void LogClaims(const Graph& graph, const Partitioning& partitioning, const OrtLogger* logger = nullptr);

}  // namespace mlx_ep
