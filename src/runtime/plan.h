// A compiled partition's plan: everything needed to trace it into an MLX function, owned,
// so it outlives the OrtGraph it was built from.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/graph.h"
#include "ops/op.h"
#include "ops/registry.h"

namespace mlx_ep {

struct Plan;
class RowTracker;  // runtime/rows.h

/** A MatMul whose B is a block of columns of a weight merged with its siblings' (MatMuls on the
 *  same input: runtime/matmul_siblings.h). */
struct MergedColumns {
  std::string weight;  ///< the merged constant, in Plan::constants
  int64_t column = 0, width = 0;
  /** The group's biases side by side, in Plan::constants, when every member's product has one
   *  (runtime/matmul_bias.h); else empty. */
  std::string bias;
};

/** A MatMulNBits of a merged group (runtime/nbits_siblings.h): the trace runs the group's node
 *  once over its members' weights side by side, and this node's output is its columns. */
struct MergedNBits {
  std::string weight, scales, zero_points;   ///< the merged constants (zero_points empty: none)
  int64_t column = 0, width = 0, total = 0;  ///< this member's columns of the group's `total`
};

/** A constant held as rows [begin, end) of a merged constant (its first axis). */
struct MergedRows {
  std::string constant;
  int64_t begin = 0, end = 0;
};

/** One node of the plan with its translation and the inputs it reads on the host. */
struct PlanNode {
  Node node;
  const OpSpec* spec = nullptr;
  /** Indices into node.AllInputs() (past node.inputs: implicit inputs). */
  std::vector<size_t> host_inputs;
  /** Plans of the node's bodies (If/Loop/Scan), by attribute name; traced inline on request. */
  std::map<std::string, std::shared_ptr<const Plan>> subplans;
  /** Some consumer needs an output of this node as a host value: it must fold when traced. */
  bool must_fold = false;
  /** Set for a MatMul of a merged group: the trace computes the group's product once and this
   *  node's output is its columns. */
  std::optional<MergedColumns> merged;
  /** Set for a MatMulNBits of a merged group, likewise. */
  std::optional<MergedNBits> merged_nbits;
  /** A MatMul (not merged) whose one reader adds this 1-D constant: the trace may compute both as
   *  one product (runtime/matmul_bias.h). */
  std::optional<std::string> bias;
  /** That Add: its output is this MatMul output where the trace added the bias there. */
  std::optional<std::string> bias_added_to;
};

/** A fused cluster ready to be traced. */
struct Plan {
  std::string name;                      ///< the fused node's name
  std::vector<std::string> input_names;  ///< in the fused node's input order
  std::vector<bool> input_is_host;       ///< inputs some node reads as host values (directly or by folding)
  std::vector<std::string> output_names;
  std::vector<ElemType> output_types;
  std::vector<PlanNode> nodes;  ///< topological
  /** Constant initializers as MLX arrays (owned copies); read them through ConstantView. */
  std::unordered_map<std::string, mx::array> constants;
  /** Constants held transposed (weight_layout.h): the trace reads their transposed view. */
  std::unordered_set<std::string> transposed_constants;
  /** Weights held as columns of a merged constant, by their own names (read as a view of it). */
  std::unordered_map<std::string, MergedColumns> merged_members;
  /** Constants held as rows of a merged constant (a merged MatMulNBits group's B, scales and zero
   *  points), by their own names (read as a view of it). */
  std::unordered_map<std::string, MergedRows> merged_rows;
  /** Constant initializers with a host value in the trace: those some node reads on the host
   *  (directly or through a folded node), and every small one (so shape arithmetic folds them). */
  std::unordered_map<std::string, std::shared_ptr<const Tensor>> host_constants;
  /** Expected element type of every value the plan produces (checked after each node). */
  std::unordered_map<std::string, ElemType> value_types;
  /** True for the plan of a body: names it neither produces nor holds come from the enclosing trace. */
  bool is_subgraph = false;
};

/** Constant `name` of `plan` as the trace reads it (a view of the held array for
 *  transposed_constants), or nullopt when the plan holds no such constant. */
std::optional<mx::array> ConstantView(const Plan& plan, const std::string& name, mx::Stream stream);

/** Builds the plan for a fused cluster. `graph` holds the cluster's nodes with all constant
 *  initializer data copied. Throws std::invalid_argument when a node cannot be planned. */
Plan BuildPlan(const Graph& graph, const std::string& name, std::vector<std::string> input_names,
               std::vector<std::string> output_names, const OpRegistry& registry);

/** A partition output that is a partition input updated in place (InPlaceUpdate, declared by
 *  the node that produces it): indices into the plan's outputs and inputs, and where TracePlan's
 *  outputs hold the rows and offsets. */
struct InPlaceOutput {
  size_t output = 0;   ///< partition output
  size_t input = 0;    ///< partition input (same shape and type; read by that node only)
  int axis = 0;        ///< the rows' axis (>= 1)
  size_t rows = 0;     ///< index of the rows in TracePlan's outputs
  size_t offsets = 0;  ///< index of the int32 offsets [shape(0)] in TracePlan's outputs
};

/** What a trace did, for the runner's choices and counters. */
struct TraceInfo {
  bool saw_empty = false;  ///< some input or produced value has zero elements
  size_t folded = 0;       ///< nodes evaluated on the host (shape arithmetic folded)
  /** Messages of the runtime checks (OpContext::Require) by check code, see TracePlan. */
  std::vector<std::string> check_messages;
  /** Per check code: an assumption of a trace with dynamic dims (OpContext::Assume). */
  std::vector<bool> check_is_assumption;
  /** Outputs that are inputs updated in place, see TracePlan. */
  std::vector<InPlaceOutput> in_place;
  /** Set by the caller: follows the top-level nodes (a trace with padded prompt rows). */
  RowTracker* rows = nullptr;
};

// Dynamic dims (docs/dynamic_shapes.md): one compiled function for every value of some input
// dims. Nodes that read a value of dynamic shape form a prologue, run uncompiled each run (cheap
// elementwise ops and reductions only); the rest is traced with static shapes, the prologue's
// results and the dynamic inputs' shapes (as data) among its inputs.

/** Per plan input, per axis: the dynamic dim's symbol (>= 0) or -1 for a static axis. */
using DynamicAxes = std::vector<std::vector<int>>;

/** The prologue of a trace with dynamic dims. */
struct Prologue {
  std::vector<size_t> nodes;          ///< indices into Plan::nodes, in order
  std::vector<std::string> boundary;  ///< prologue values the rest reads (static shapes)
  std::vector<mx::Shape> shapes;      ///< their shapes (checked every run)
  std::vector<std::set<int>> deps;    ///< the symbols each depends on
};

/** Finds the prologue for `axes` at these inputs. Throws DynamicShapeUnsupported when a value of
 *  dynamic shape reaches a node that is not Shape/Size of an input nor a cheap elementwise op or
 *  reduction over constants, or a partition output. */
Prologue FindPrologue(const Plan& plan, const DynamicAxes& axes, const std::vector<mx::array>& inputs,
                      mx::Stream stream);
/** The prologue's boundary values for `inputs` (unevaluated). Throws DynamicShapeUnsupported
 *  when one has another shape than FindPrologue saw. */
std::vector<mx::array> RunPrologue(const Plan& plan, const Prologue& prologue,
                                   const std::vector<mx::array>& inputs, mx::Stream stream);

/** The dynamic part of a trace: `TracePlan`'s inputs with dynamic axes are placeholders of the
 *  shape at trace time, never read as data. */
struct DynamicTrace {
  const DynamicAxes* axes = nullptr;
  const Prologue* prologue = nullptr;
  std::vector<std::optional<mx::array>> runtime_shapes;  ///< per input: int64 [rank] for dynamic ones
  std::vector<mx::array> boundary;                       ///< RunPrologue's values
};

/** Values with at most this many elements keep their host value through a trace even when no
 *  node needs it, so that the arithmetic built on them folds too. */
inline constexpr int64_t kMaxFoldedElements = 1 << 16;

/** Traces the plan: feeds `inputs` (one per input_names entry) through every node's translation
 *  and returns the outputs, row-contiguous. When translations recorded runtime checks, one more
 *  output follows: an int32 scalar, -1 when every check held, else the code of the first that
 *  failed (info->check_messages[code] says what). Checks of folded nodes fail while tracing.
 *  Then, per partition output that is a partition input updated in place (InPlaceUpdate), its
 *  rows and offsets (info->in_place says which; empty without `info`).
 *  `host_inputs[i]` is set for inputs read on the host. Nodes whose inputs all have host values fold: they
 * are evaluated on MLX's CPU device while tracing and their outputs become constants of the traced graph. */
std::vector<mx::array> TracePlan(const Plan& plan, const std::vector<mx::array>& inputs,
                                 const std::vector<const Tensor*>& host_inputs, mx::Stream stream,
                                 TraceInfo* info = nullptr, const DynamicTrace* dynamic = nullptr);

}  // namespace mlx_ep
