// The contract every op family implements: a claim ("can MLX do THIS node exactly?") and a
// translation (node + input arrays -> output arrays), registered per (domain, op, opset range).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <mlx/mlx.h>

#include "graph/graph.h"
#include "runtime/device.h"  // RuntimeDevice: the translations read the device policy

namespace mlx_ep {

namespace mx = mlx::core;

/** The answer of a claim: yes (with the inputs whose values must be known on the host), or no with a reason.
 */
struct Claim {
  bool ok = false;
  std::string reason;
  /** Inputs read as host values when tracing (shapes, axes, ...). Inside a partition they come from
   *  the trace's host lane (values folded from shapes and constants); a value that depends on
   *  runtime data is read from ORT's tensor, and the compiled graph is specialised on it. */
  std::vector<size_t> host_inputs;
  /** Host inputs that must derive from constants and shapes alone: the partitioner declines the
   *  node (with `fold_reason` and the value named) when one depends on runtime data, instead of
   *  specialising the compiled function on values that change every run (a loop condition). */
  std::vector<size_t> fold_inputs;
  std::string fold_reason;
  /** Host inputs worth specialising on even when computed from partition inputs by folding ops
   *  (an If condition from a sample-rate input): that chain stays in the node's partition, and
   *  the inputs it starts from are read on the host (one compiled function per value). */
  std::vector<size_t> specialise_inputs;

  /** A positive claim. */
  static Claim Yes(std::vector<size_t> host_inputs = {}) {
    return {true, "", std::move(host_inputs), {}, "", {}};
  }
  /** A refusal with a reason shown in the claim report. */
  static Claim No(std::string reason) { return {false, std::move(reason), {}, {}, "", {}}; }
};

/** What the claim of a node with subgraphs learns about one body (every body node is claimable,
 *  recursively, or the node is declined before its own claim runs). Host values are tracked by
 *  their roots: the body inputs and outer-scope values a value's host lane derives from
 *  (constants and shapes add no root). */
struct SubgraphFacts {
  /** Roots of every value some body node reads on the host. */
  std::set<std::string> host_roots;
  /** Roots of the values among those that must fold (a nested Loop's condition, say). */
  std::set<std::string> fold_roots;
  /** Per body output: the roots of its host value, or nullopt when it depends on runtime data. */
  std::vector<std::optional<std::set<std::string>>> output_roots;
};

/** What a claim sees: the node and the static facts (types, shapes, constants) about its values. */
class NodeView {
 public:
  NodeView(const Node& node, const Graph& graph,
           const std::map<std::string, SubgraphFacts>* subgraphs = nullptr)
      : node_(node), graph_(graph), subgraphs_(subgraphs) {}

  /** The node. */
  const Node& node() const { return node_; }
  /** Number of input slots (including absent optional ones). */
  size_t num_inputs() const { return node_.inputs.size(); }
  /** Number of output slots. */
  size_t num_outputs() const { return node_.outputs.size(); }
  /** True when input slot `i` exists and is not an absent optional input. */
  bool has_input(size_t i) const { return i < node_.inputs.size() && !node_.inputs[i].empty(); }
  /** True when output slot `i` exists and is used. */
  bool has_output(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }
  /** Element type of input `i` (kUndefined when absent or unknown). */
  ElemType input_type(size_t i) const;
  /** Element type of output `i`. */
  ElemType output_type(size_t i) const;
  /** Static shape of input `i` (-1 for unknown dims), nullopt when the rank is unknown. */
  std::optional<std::vector<int64_t>> input_shape(size_t i) const;
  /** Static rank of input `i`, if known. */
  std::optional<int64_t> input_rank(size_t i) const;
  /** Data of input `i` when it is a constant initializer whose data was copied, else nullptr. */
  const Tensor* constant_input(size_t i) const;
  /** True when input `i` is a constant initializer (data copied or not). */
  bool is_constant_input(size_t i) const;
  /** Facts about the body of graph attribute `attr`, or nullptr when the node has none. */
  const SubgraphFacts* subgraph(const std::string& attr) const;

 private:
  const ValueInfo* input_info(size_t i) const;
  const Node& node_;
  const Graph& graph_;
  const std::map<std::string, SubgraphFacts>* subgraphs_;
};

/** A value crossing into or out of a traced subgraph: its array and, when known while tracing,
 *  its host value. */
struct TracedValue {
  mx::array array;
  std::shared_ptr<const Tensor> host;
};

/** Traces the body of a graph attribute inline: binds the body's inputs (in order) and returns
 *  its outputs. Body nodes resolve outer-scope names against the enclosing trace. */
using SubgraphTracer =
    std::function<std::vector<TracedValue>(const std::string& attr, const std::vector<TracedValue>& inputs)>;

/** What a translation sees: traced input arrays, host values, attributes, expected output types. */
/** A condition on runtime data a translation cannot check while tracing (a compiled MLX graph
 *  cannot raise): `ok` must be all true once evaluated, or the run fails with `message`. */
struct RuntimeCheck {
  mx::array ok;
  std::string message;  ///< "[MlxEp][Op] node: ..."; must not depend on the input shapes
  /** An assumption of a trace with dynamic dims (OpContext::Assume): when it fails, the run is
   *  not an error; the runner drops the compiled function and traces the input shapes instead. */
  bool assumption = false;
};

/** Thrown while tracing with dynamic input dims (docs/dynamic_shapes.md) when the trace cannot be
 *  exact for every value of those dims: the runner then compiles per input shape, as without
 *  them. `symbols` names the dynamic dims at fault (empty: all of them). */
struct DynamicShapeUnsupported : std::runtime_error {
  explicit DynamicShapeUnsupported(const std::string& what, std::set<int> symbols = {})
      : std::runtime_error(what), symbols(std::move(symbols)) {}
  std::set<int> symbols;
};

/** An output that is an input updated in place (a KV cache in the shared-buffer layout): output
 *  `output` equals input `input` (same shape and type) except, for each index b of the leading
 *  axis, rows [offsets[b], offsets[b] + S) along `axis`, which hold rows[b] (S = rows.shape(axis)).
 *  When ORT hands the partition the input's buffer as the output's, the runner writes only `rows`
 *  into it and never evaluates the full output (runtime/runner.cc). */
struct InPlaceUpdate {
  size_t output = 0;  ///< the node's output slot
  size_t input = 0;   ///< the node's input slot
  int axis = 0;       ///< >= 1
  mx::array rows;     ///< the output's dtype; the output's shape but S along `axis`
  mx::array offsets;  ///< [output.shape(0)] int32, data (computed in the graph)
};

class OpContext {
 public:
  OpContext(const Node& node, std::vector<std::optional<mx::array>> inputs,
            std::vector<const Tensor*> host_values, std::vector<ElemType> output_types, mx::Stream stream)
      : node(node),
        stream(stream),
        inputs_(std::move(inputs)),
        host_(std::move(host_values)),
        output_types_(std::move(output_types)) {}

  const Node& node;
  /** The stream every mx:: op of the translation must run on (pass it last). */
  mx::Stream stream;

  /** Number of input slots. */
  size_t num_inputs() const { return inputs_.size(); }
  /** True when input `i` is present. */
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i].has_value(); }
  /** Input `i`; throws when absent. */
  const mx::array& input(size_t i) const;
  /** Host value of input `i`; the claim must have listed `i` in host_inputs. Indices past the
   *  explicit inputs name implicit (outer-scope) inputs, as in Node::AllInputs. */
  const Tensor& host(size_t i) const;
  /** Host value of input `i` when the trace knows one (listed or not), else nullptr. */
  const Tensor* host_if_known(size_t i) const { return i < host_.size() ? host_[i] : nullptr; }
  /** Input `i`'s value as a double when the trace knows it and it is one element, else nullopt. */
  std::optional<double> known_scalar(size_t i) const;
  /** Host value of input `i` as int64 values. */
  std::vector<int64_t> host_ints(size_t i) const { return host(i).ToInt64(); }
  /** Number of output slots. */
  size_t num_outputs() const { return output_types_.size(); }
  /** ONNX element type expected for output `i`. */
  ElemType output_type(size_t i) const { return output_types_.at(i); }
  /** MLX dtype expected for output `i`. */
  mx::Dtype output_dtype(size_t i) const;
  /** Throws std::invalid_argument("[MlxEp][Op] node: message"). */
  [[noreturn]] void Fail(const std::string& message) const;
  /** Fails the run with Fail's message unless every element of `ok` (bool) is true: checked
   *  after evaluation, at the cost of one scalar output of the compiled graph. */
  void Require(const mx::array& ok, const std::string& message) const;
  /** Where Require records its checks (set by the trace). */
  void set_checks(std::vector<RuntimeCheck>* checks) { checks_ = checks; }
  /** How many node inputs of the partition read input `i`'s value (this node's included), plus
   *  one when it is a partition output; SIZE_MAX where the trace does not tell (a body's values). */
  size_t readers(size_t i) const { return i < readers_.size() ? readers_[i] : SIZE_MAX; }
  /** Set by the trace. */
  void set_readers(std::vector<size_t> readers) { readers_ = std::move(readers); }
  /** Declares that output `output` is input `input` with `rows` written at `offsets` along `axis`
   *  (InPlaceUpdate). The output itself must still be returned, complete: it is what the runner
   *  writes when ORT's buffers differ. Ignored where the trace cannot use it (folded nodes,
   *  bodies, values that are not partition inputs/outputs). */
  void UpdateInPlace(size_t output, size_t input, int axis, mx::array rows, mx::array offsets) const;
  /** Where UpdateInPlace records its declarations (set by the trace; null: ignored). */
  void set_in_place(std::vector<InPlaceUpdate>* updates) { in_place_ = updates; }

  // Traces with dynamic input dims (docs/dynamic_shapes.md): one compiled function serves every
  // value of some input dims, so a value computed from them (Shape of such an input, and what
  // is computed from it) is data, not a host value.
  /** Input `i`'s value in this run when it is data computed from dynamic dims, else nullptr. Only
   *  for deciding whether the trace can be exact (FailDynamic) and what to Assume: the compiled
   *  function also serves runs where it differs. */
  const Tensor* trace_value(size_t i) const { return i < trace_values_.size() ? trace_values_[i] : nullptr; }
  /** Input `i`'s shape as int64 [rank] data when some of its dims are dynamic, else nullopt.
   *  Ops that fold from shapes (Shape, Size) must build their output from it. */
  const std::optional<mx::array>& runtime_shape(size_t i) const {
    static const std::optional<mx::array> none;
    return i < runtime_shapes_.size() ? runtime_shapes_[i] : none;
  }
  /** The trace is exact only where every element of `ok` (bool) holds: checked after
   *  evaluation; where it fails, the runner retraces for the input shapes (not an error). */
  void Assume(const mx::array& ok, const std::string& message) const {
    Require(ok, message);
    checks_->back().assumption = true;
  }
  /** Throws DynamicShapeUnsupported: this node cannot be exact with dynamic dims. */
  [[noreturn]] void FailDynamic(const std::string& message) const {
    throw DynamicShapeUnsupported("[MlxEp][" + node.op_type + "] " + node.Label() + ": " + message);
  }
  /** Set by the trace for a trace with dynamic dims. */
  void set_trace_values(std::vector<const Tensor*> values) { trace_values_ = std::move(values); }
  void set_runtime_shapes(std::vector<std::optional<mx::array>> shapes) {
    runtime_shapes_ = std::move(shapes);
  }

  /** Traces the subgraph of attribute `attr` (If/Loop/Scan translations only). */
  std::vector<TracedValue> TraceSubgraph(const std::string& attr,
                                         const std::vector<TracedValue>& inputs) const;
  /** Makes the node's output `k` known on the host lane too (a value a body computed there). */
  void SetHostOutput(size_t k, std::shared_ptr<const Tensor> value) const;
  /** Host values set with SetHostOutput, by output slot (entries may be null). */
  const std::vector<std::shared_ptr<const Tensor>>& host_outputs() const { return host_outputs_; }
  /** Installs the tracer TraceSubgraph uses (the plan's trace does). */
  void set_subgraph_tracer(SubgraphTracer tracer) { tracer_ = std::move(tracer); }

 private:
  std::vector<RuntimeCheck>* checks_ = nullptr;
  std::vector<InPlaceUpdate>* in_place_ = nullptr;
  std::vector<size_t> readers_;  // by input: see readers()
  std::vector<std::optional<mx::array>> inputs_;
  std::vector<const Tensor*> host_;
  std::vector<ElemType> output_types_;
  SubgraphTracer tracer_;
  mutable std::vector<std::shared_ptr<const Tensor>> host_outputs_;
  std::vector<const Tensor*> trace_values_;
  std::vector<std::optional<mx::array>> runtime_shapes_;
};

/** Decides whether a node can run exactly on MLX. Never throws (a throw counts as "no"). */
using ClaimFn = Claim (*)(const NodeView&);
/** Builds the node's outputs from its inputs; one array per output slot. Throws on misuse. */
using TranslateFn = std::vector<mx::array> (*)(const OpContext&);

/** Whether a node can be evaluated on the host while its partition is traced. A partition is
 *  traced once per input signature (dtypes and shapes), so a value computed only from shapes and
 *  constants is known then: folding it keeps shape arithmetic (Shape -> Gather -> Concat ->
 *  Reshape) inside one partition and adds nothing to the compile-cache key. */
enum class HostEval {
  kNone,        ///< only ever an MLX computation
  kFromValues,  ///< folded when every input has a host value: the op's own translation runs
                ///< eagerly on MLX's CPU device (one semantics for both lanes)
  kFromShapes,  ///< always folded: reads only the shapes of its inputs (Shape, Size); with dynamic
                ///< dims the translation computes its output from OpContext::runtime_shape
};

/** One registry entry: an op of a domain over an inclusive range of opset versions. */
struct OpSpec {
  std::string domain;  ///< "" for ai.onnx
  std::string op_type;
  int since;  ///< first opset version (a node's since_version must fall in [since, until])
  int until;  ///< last opset version, inclusive
  ClaimFn claim;
  TranslateFn translate;
  HostEval host_eval = HostEval::kNone;  ///< how the op folds at trace time
};

/** Maps an ONNX element type to an MLX dtype; nullopt when MLX has none. */
std::optional<mx::Dtype> ToMlxDtype(ElemType t);
/** Maps an MLX dtype back to the ONNX element type. */
ElemType FromMlxDtype(mx::Dtype d);

/** Copies a host tensor (a constant, an attribute tensor) into a new MLX array. */
mx::array ToArray(const Tensor& t);
/** An MLX array over `t`'s bytes, keeping `t` alive: no copy on MLX's CPU device (a GPU device
 *  copies them, as MLX's CUDA backend cannot wrap host memory). For constant initializers,
 *  which the graph snapshot already copied out of ORT: held once, not twice. */
mx::array ShareArray(std::shared_ptr<const Tensor> t);

/** True when MLX can hold and compute `t` on the runtime device (e.g. no float64 on GPUs). */
bool DeviceSupports(ElemType t);

/** The one value of host tensor `t` (an input's host value, or one a traced body folded) as int64;
 *  fails naming `what` unless `t` holds exactly one element. */
int64_t HostScalar(const OpContext& c, const Tensor& t, const std::string& what);

}  // namespace mlx_ep
