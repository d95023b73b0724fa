// PlanTrace with dynamic dims (docs/dynamic_shapes.md): binding the dynamic inputs and the
// prologue's values, and tracing the nodes that read a value computed from dynamic dims.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "runtime/plan_trace.h"

namespace mlx_ep::trace_internal {

// Trace with dynamic dims: the dynamic inputs (placeholders), their shapes as data, and the
// prologue's values.
void PlanTrace::BindDynamic() {
  for (size_t i = 0; i < plan_.input_names.size(); ++i) {
    std::set<int> symbols;
    for (int s : dyn_->axes->at(i))
      if (s >= 0) symbols.insert(s);
    if (symbols.empty()) continue;
    const std::string& name = plan_.input_names[i];
    dyn_shaped_.insert(name);
    deps_[name] = std::move(symbols);
    runtime_shape_.insert_or_assign(name, dyn_->runtime_shapes.at(i).value());
  }
  const Prologue& p = *dyn_->prologue;
  for (size_t k = 0; k < p.boundary.size(); ++k) {
    Note(dyn_->boundary.at(k));
    values_.insert_or_assign(p.boundary[k], dyn_->boundary[k]);
    deps_[p.boundary[k]] = p.deps[k];
  }
  skip_.insert(p.nodes.begin(), p.nodes.end());
}

// The dynamic dims the inputs of `pn` depend on (their shape or their value).
std::set<int> PlanTrace::DepsOf(const PlanNode& pn) const {
  std::set<int> deps;
  for (const auto& in : pn.node.AllInputs())
    if (auto it = deps_.find(in); it != deps_.end()) deps.insert(it->second.begin(), it->second.end());
  return deps;
}

std::shared_ptr<const Tensor> PlanTrace::Hint(const std::string& name) const {
  auto it = hint_.find(name);
  return it == hint_.end() ? nullptr : it->second;
}

// The node evaluated on the host from this run's values, as it would fold in a trace of this
// run's shapes: an error there is one for the shapes' own trace to report.
template <typename Fail>
std::vector<std::shared_ptr<const Tensor>> PlanTrace::HintOutputs(const PlanNode& pn, const Fail& fail) {
  std::vector<std::shared_ptr<const Tensor>> hints(pn.node.outputs.size());
  const size_t checks_before = check_sink_->size();
  try {
    OpContext now = Context(pn, true, /*with_hints=*/true);
    const std::vector<mx::array> h = pn.spec->translate(now);
    RunChecksNow(checks_before);
    for (size_t k = 0; k < h.size() && k < hints.size(); ++k)
      if (static_cast<int64_t>(h[k].size()) <= kMaxFoldedElements)
        hints[k] = ToHostTensor(h[k], host_stream_);
  } catch (const std::invalid_argument& e) {
    check_sink_->erase(check_sink_->begin() + checks_before, check_sink_->end());
    fail(std::string("fails on this run's values: ") + e.what());
  }
  return hints;
}

// A node reading a value computed from dynamic dims (the prologue's are skipped). Shape and
// Size of a dynamic input compute its dims as data; other nodes must not read a value of
// dynamic shape, nor need on the host a value computed from one. Where all inputs are known
// in this run (host values or trace values), the node also runs on the host for its outputs'
// trace values (OpContext::trace_value). False: the node reads nothing dynamic.
bool PlanTrace::RunDynamic(const PlanNode& pn) {
  const std::set<int> deps = DepsOf(pn);
  if (deps.empty()) return false;
  auto fail = [&](const std::string& why) {
    throw DynamicShapeUnsupported("[MlxEp] " + pn.node.Label() + " (" + pn.node.op_type + ") " + why, deps);
  };
  const std::vector<std::string> all = pn.node.AllInputs();
  if (!pn.subplans.empty()) fail("has subgraphs and reads a value computed from dynamic dims");
  std::vector<mx::array> outs;
  std::vector<std::shared_ptr<const Tensor>> hints(pn.node.outputs.size());
  const bool shaped =
      std::any_of(all.begin(), all.end(), [&](const auto& in) { return dyn_shaped_.count(in); });
  if (shaped) {
    // Shape and Size build their output from OpContext::runtime_shape (src/ops/shape.cc).
    if (!pn.node.domain.empty() || (pn.node.op_type != "Shape" && pn.node.op_type != "Size"))
      fail("reads a value of dynamic shape");
    std::vector<std::optional<mx::array>> shapes;
    for (const auto& in : pn.node.inputs) {
      auto it = runtime_shape_.find(in);
      if (dyn_shaped_.count(in) && it == runtime_shape_.end())
        fail("reads the shape of a computed value of dynamic shape");
      shapes.push_back(it == runtime_shape_.end() ? std::nullopt : std::optional<mx::array>(it->second));
    }
    OpContext ctx = Context(pn, false);
    ctx.set_runtime_shapes(std::move(shapes));
    outs = pn.spec->translate(ctx);
    OpContext now = Context(pn, true);  // the same op on this run's shapes: the trace values
    const std::vector<mx::array> h = pn.spec->translate(now);
    for (size_t k = 0; k < h.size() && k < hints.size(); ++k) hints[k] = ToHostTensor(h[k], host_stream_);
  } else {
    if (pn.must_fold) fail("computes a value needed on the host from dynamic dims");
    for (size_t k : pn.host_inputs)
      if (!Host(all.at(k)))
        fail("reads input " + std::to_string(k) + " on the host, computed from dynamic dims");
    OpContext ctx = Context(pn, false);
    std::vector<const Tensor*> values;
    bool all_known = pn.spec->host_eval == HostEval::kFromValues;
    for (size_t k = 0; k < all.size(); ++k) {
      auto h = Host(all[k]);
      if (!h) h = Hint(all[k]);
      values.push_back(h.get());  // kept alive by host_/hint_
      if (k < pn.node.inputs.size() && !all[k].empty() && !h) all_known = false;
    }
    ctx.set_trace_values(std::move(values));
    node_updates_.clear();
    outs = pn.spec->translate(ctx);
    // GroupQueryAttention's shared KV buffer with a dynamic mask length: present is still past
    // updated in place.
    for (InPlaceUpdate& u : node_updates_) AcceptInPlace(pn, outs, std::move(u));
    node_updates_.clear();
    if (all_known) hints = HintOutputs(pn, fail);
  }
  CheckOutputCount(pn, outs);
  for (size_t k = 0; k < pn.node.outputs.size() && k < outs.size(); ++k) {
    const std::string& name = pn.node.outputs[k];
    if (name.empty()) continue;
    CheckOutput(plan_, pn, k, outs[k]);
    Note(outs[k]);
    Count(pn, name, ByteSize(outs[k]));
    values_.insert_or_assign(name, outs[k]);
    deps_[name] = deps;
    if (hints[k]) hint_[name] = hints[k];
  }
  Release(ran_++, pn);
  return true;
}

}  // namespace mlx_ep::trace_internal
