// PlanTrace: one trace of a plan (TracePlan, runtime/plan.h). Internal to src/runtime/plan.cc
// and, for the part that traces with dynamic dims (docs/dynamic_shapes.md), plan_dynamic.cc.
#pragma once

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/plan.h"

namespace mlx_ep::trace_internal {

/** Throws when output `k` of `pn` has another element type than the plan declares. */
void CheckOutput(const Plan& plan, const PlanNode& pn, size_t k, const mx::array& a);
/** Bytes of `a`, saturating instead of wrapping for absurd shapes. */
size_t ByteSize(const mx::array& a);
/** Throws "Failed to allocate memory" (OutOfMemoryError) unless `bytes` can be allocated. */
void EnsureAllocatable(size_t bytes, const std::string& what);
/** A row-contiguous host copy of an array that does not depend on the traced inputs. */
std::shared_ptr<const Tensor> ToHostTensor(const mx::array& a, mx::Stream stream);

// One trace of a plan: every value has an MLX array and, where it is known while tracing, a host
// value (the host lane). Nodes whose inputs are all on the host lane fold.
class PlanTrace {
 public:
  PlanTrace(const Plan& plan, mx::Stream stream, TraceInfo* info, const PlanTrace* parent = nullptr,
            const DynamicTrace* dynamic = nullptr)
      : plan_(plan),
        stream_(stream),
        host_stream_(mx::default_stream(mx::Device::cpu)),
        info_(info),
        parent_(parent),
        dyn_(dynamic),
        check_sink_(parent ? parent->check_sink_ : &checks_) {
    for (const auto& [name, t] : plan.host_constants) host_[name] = t;
    for (size_t i = 0; i < plan.nodes.size(); ++i)
      for (const auto& in : plan.nodes[i].node.AllInputs()) last_use_[in] = i;  // bodies read implicit ones
    for (const auto& out : plan.output_names) last_use_[out] = plan.nodes.size();  // never released
    for (const PlanNode& pn : plan.nodes)
      for (const auto& in : pn.node.AllInputs()) ++readers_[in];
    for (const auto& out : plan.output_names) ++readers_[out];  // ORT reads a partition output
  }

  // A body's inputs: arrays and, where the enclosing translation knows them, host values.
  void BindTraced(const std::vector<TracedValue>& inputs);

  std::vector<TracedValue> TracedOutputs() const;

  void BindInputs(const std::vector<mx::array>& inputs, const std::vector<const Tensor*>& host);

  void Run(const PlanNode& pn);

  std::vector<mx::array> Outputs();

 private:
  // A node's outputs when it does not fold: a merged MatMul's columns, a MatMul with its bias
  // (PlanNode::bias) and that bias's Add passing it on, else the node's translation.
  std::vector<mx::array> TranslateTraced(const PlanNode& pn, const OpContext& c);
  // A merged MatMul's output (PlanNode::merged): its columns of the group's product, which the
  // group's first MatMul computes (with the group's biases where it can: runtime/matmul_bias.h).
  mx::array MergedColumnsOf(const PlanNode& pn, const OpContext& c);
  mx::array MergedNBitsOf(const PlanNode& pn);
  /** The group's product as its members' columns, by first column (`starts`: every member's);
   *  `packed`: one row's columns with packed strides (ColumnParts, matmul_siblings.h). */
  std::map<int64_t, mx::array> MemberColumns(const std::set<int64_t>& starts, const mx::array& product,
                                             bool packed);
  // Hands the node with its inputs' arrays and host values and its outputs to info_->rows.
  void ObserveRows(const PlanNode& pn, const std::vector<mx::array>& outs);
  // Trace with dynamic dims: the dynamic inputs (placeholders), their shapes as data, and the
  // prologue's values.
  void BindDynamic();

  // The dynamic dims the inputs of `pn` depend on (their shape or their value).
  std::set<int> DepsOf(const PlanNode& pn) const;

  std::shared_ptr<const Tensor> Hint(const std::string& name) const;

  // A node reading a value computed from dynamic dims (the prologue's are skipped). Shape and
  // Size of a dynamic input compute its dims as data; other nodes must not read a value of
  // dynamic shape, nor need on the host a value computed from one. Where all inputs are known
  // in this run (host values or trace values), the node also runs on the host for its outputs'
  // trace values (OpContext::trace_value). False: the node reads nothing dynamic.
  bool RunDynamic(const PlanNode& pn);

  // The node evaluated on the host from this run's values, as it would fold in a trace of this
  // run's shapes: an error there is one for the shapes' own trace to report.
  template <typename Fail>
  std::vector<std::shared_ptr<const Tensor>> HintOutputs(const PlanNode& pn, const Fail& fail);

  bool CanFold(const PlanNode& pn) const {
    if (pn.spec->host_eval == HostEval::kFromShapes) return true;
    if (pn.spec->host_eval != HostEval::kFromValues) return false;
    return std::all_of(pn.node.inputs.begin(), pn.node.inputs.end(),
                       [&](const std::string& in) { return in.empty() || Host(in); });
  }

  // The host value of `name` here or in an enclosing trace, or null.
  std::shared_ptr<const Tensor> Host(const std::string& name) const {
    if (name.empty()) return nullptr;
    if (auto it = host_.find(name); it != host_.end()) return it->second;
    return parent_ && !Produces(name) ? parent_->Host(name) : nullptr;
  }

  // True when `name` is a value of this trace's own scope (input, constant or produced).
  bool Produces(const std::string& name) const { return values_.count(name) || plan_.constants.count(name); }

  // Traces body `attr` of `pn` inline, resolving its outer-scope names against this trace.
  std::vector<TracedValue> TraceBody(const PlanNode& pn, const std::string& attr,
                                     const std::vector<TracedValue>& inputs) const;

  // The node's context. A folding node reads host values (as CPU arrays) and runs on MLX's
  // CPU device, so nothing of it is traced; Shape and Size read only their inputs' shapes.
  // `with_hints`: trace values count as host values (HintOutputs).
  OpContext Context(const PlanNode& pn, bool fold, bool with_hints = false);

  std::optional<mx::array> Array(const std::string& name) const;

  // Keeps a node's InPlaceUpdate when the runner can act on it: the output is one partition
  // output, the input a partition input only this node reads, and the shapes fit. Else the
  // output is written whole, as any other.
  void AcceptInPlace(const PlanNode& pn, const std::vector<mx::array>& outs, InPlaceUpdate u);

  static bool TooLargeToFold(const std::vector<mx::array>& outs) {
    return std::any_of(outs.begin(), outs.end(), [](const mx::array& a) {
      return static_cast<int64_t>(a.size()) > kMaxFoldedElements;
    });
  }

  // A folded node's checks hold host data: evaluate them at once.
  void RunChecksNow(size_t from);

  // -1 when every check holds, else the index of the first that fails; the messages go to info_.
  mx::array FirstFailedCheck();

  static size_t SaturatingAdd(size_t a, size_t b) {
    return a > std::numeric_limits<size_t>::max() - b ? std::numeric_limits<size_t>::max() : a + b;
  }

  // The peak of live bytes when the nodes run in plan order, each value live from its node to its
  // last consumer (a partition output to the end), as ORT's CPU EP would allocate them.
  void Count(const PlanNode& pn, const std::string& name, size_t bytes);

  // After node `index` ran: the values it was the last consumer of are dead, and its outputs that
  // nobody reads.
  void Release(size_t index, const PlanNode& pn);

  void Note(const mx::array& a) {
    if (info_ && a.size() == 0) info_->saw_empty = true;
  }

  static void CheckOutputCount(const PlanNode& pn, const std::vector<mx::array>& outs);

  const Plan& plan_;
  mx::Stream stream_;
  mx::Stream host_stream_;
  TraceInfo* info_;
  const PlanTrace* parent_;
  const DynamicTrace* dyn_;                              // a trace with dynamic dims, else null
  std::set<size_t> skip_;                                // the prologue's nodes
  std::set<std::string> dyn_shaped_;                     // values of dynamic shape
  std::unordered_map<std::string, std::set<int>> deps_;  // value -> dynamic dims it depends on
  std::unordered_map<std::string, std::shared_ptr<const Tensor>> hint_;  // trace values
  std::unordered_map<std::string, mx::array> runtime_shape_;             // dynamic input -> its dims as data
  std::vector<RuntimeCheck> checks_;         // OpContext::Require, of nodes not folded
  std::vector<RuntimeCheck>* check_sink_;    // &checks_, or the enclosing trace's (a body's)
  std::vector<InPlaceUpdate> node_updates_;  // the running node's declarations
  std::vector<std::pair<InPlaceOutput, InPlaceUpdate>> in_place_;  // accepted ones, for Outputs()
  // value -> node inputs that read it, + 1 a partition output
  std::unordered_map<std::string, size_t> readers_;
  std::unordered_map<std::string, mx::array> values_;
  /** By merged weight: its product's columns of each member, by first column (one Split). */
  std::unordered_map<std::string, std::map<int64_t, mx::array>> merged_products_;
  std::set<std::string> merged_biased_;  ///< merged weights whose product has the group's biases
  std::set<std::string> biased_;         ///< MatMul outputs with their Add's bias added
  std::unordered_map<std::string, std::shared_ptr<const Tensor>> host_;
  std::unordered_map<std::string, size_t> last_use_;    // value -> index of its last consumer
  std::unordered_map<std::string, size_t> live_bytes_;  // produced values still live
  size_t ran_ = 0;                                      // nodes traced so far
  size_t live_ = 0;
  size_t bytes_ = 0;  // peak of live_, for EnsureAllocatable
  size_t largest_bytes_ = 0;
  std::string largest_;
};

}  // namespace mlx_ep::trace_internal
