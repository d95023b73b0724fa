// Loop and Scan, unrolled: the body is traced once per iteration into the enclosing MLX function.
// A Loop's trip count and condition must be host values while tracing (a constant, a folded
// shape computation, or a partition input the function is specialised on); a condition the body
// computes from runtime data is declined. See docs/control_flow.md.
#include <algorithm>

#include "ops/control_flow_internal.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

// Carried states (body inputs 2..) the loop condition's host value derives from, closed over the
// states their updates derive from: their initial values and the outer values involved must fold
// (a condition computed from runtime data is a data-dependent early exit). Empty reason on success.
std::string AddLoopConditionRoots(const NodeView& v, const Graph& body, const SubgraphFacts& facts,
                                  std::set<std::string>& known, Claim& claim) {
  if (!facts.output_roots.at(0))
    return "the loop condition the body computes depends on runtime data (a data-dependent early exit)";
  const size_t num_states = body.inputs.size() - 2;
  std::set<std::string> roots;
  std::vector<std::set<std::string>> pending = {*facts.output_roots[0]};
  while (!pending.empty()) {
    const std::set<std::string> next = std::move(pending.back());
    pending.pop_back();
    for (const auto& r : next) {
      roots.insert(r);
      for (size_t k = 0; k < num_states; ++k) {
        if (body.inputs[2 + k] != r || known.count(r)) continue;
        known.insert(r);
        AddHostInput(claim, 2 + k, true);  // the initial value, read on the host
        const auto& update = facts.output_roots.at(1 + k);
        if (!update)
          return "the loop condition depends on state '" + r +
                 "', which the body updates from runtime data (a data-dependent early exit)";
        pending.push_back(*update);
      }
    }
  }
  return AddHostRoots(v, roots, known, "the loop condition", claim, true);
}

Claim ClaimLoop(const NodeView& v) {
  const SubgraphFacts* facts = v.subgraph("body");
  const Graph* body = v.node().Subgraph("body");
  if (!facts || !body) return Claim::No("no body subgraph");
  if (body->inputs.size() < 2 || body->inputs.size() != v.num_inputs() || body->outputs.size() < 1 ||
      body->outputs.size() - 1 < body->inputs.size() - 2 || v.num_outputs() != body->outputs.size() - 1)
    return Claim::No("the body's inputs and outputs do not match the node's");
  if (v.has_input(0) && v.input_type(0) != ElemType::kInt64) return Claim::No("the trip count is not int64");
  if (v.has_input(1) && v.input_type(1) != ElemType::kBool) return Claim::No("the condition is not bool");
  if (const Tensor* m = v.constant_input(0);
      m && !v.has_input(1) && m->NumElements() == 1 && m->ToInt64()[0] > kMaxUnrolledIterations)
    return Claim::No("the trip count " + std::to_string(m->ToInt64()[0]) + " exceeds the unroll bound " +
                     std::to_string(kMaxUnrolledIterations));
  Claim claim = Claim::Yes();
  if (v.has_input(0)) AddHostInput(claim, 0, false);
  if (v.has_input(1)) AddHostInput(claim, 1, false);
  std::set<std::string> known = {body->inputs[0], body->inputs[1]};
  if (auto r = AddLoopConditionRoots(v, *body, *facts, known, claim); !r.empty()) return Claim::No(r);
  if (auto r = AddBodyRoots(v, *facts, known, claim); !r.empty()) return Claim::No(r);
  claim.fold_reason = "the loop condition the body computes";
  return claim;
}

// The value a Loop's carried state `k` starts from (with its host value when the trace has one).
TracedValue CarriedInput(const OpContext& c, size_t k) {
  const Tensor* h = c.host_if_known(2 + k);
  return {c.input(2 + k), h ? std::make_shared<const Tensor>(*h) : nullptr};
}

// The scan outputs of a loop that ran no iteration, shaped as ORT's CPU EP shapes them: the body
// output's static shape behind a leading 0 (unknown dims 0 too), or [0] when its rank is unknown.
std::vector<mx::array> ZeroTripScanLike(const OpContext& c, size_t num_states, size_t num_scans) {
  const Graph* body = c.node.Subgraph("body");
  std::vector<mx::array> out;
  for (size_t k = 0; k < num_scans; ++k) {
    mx::Shape shape = {0};
    const ValueInfo* v = body->Value(body->outputs.at(1 + num_states + k));
    if (v && v->shape)
      for (int64_t d : *v->shape) shape.push_back(d < 0 ? 0 : static_cast<int>(d));
    out.push_back(mx::zeros(shape, c.output_dtype(num_states + k), c.stream));
  }
  return out;
}

std::vector<mx::array> TranslateLoop(const OpContext& c) {
  const int64_t trips = c.has_input(0) ? HostScalar(c, c.host(0), "the trip count M") : -1;
  bool cond = !c.has_input(1) || HostScalar(c, c.host(1), "the loop condition") != 0;
  const size_t num_states = c.num_inputs() - 2;
  const size_t num_scans = c.num_outputs() - num_states;
  std::vector<TracedValue> state;
  for (size_t k = 0; k < num_states; ++k) state.push_back(CarriedInput(c, k));
  std::vector<std::vector<mx::array>> scans(num_scans);
  std::vector<mx::array> scan_like;  // a per-iteration value of each scan output (for zero trips)
  int64_t i = 0;
  for (; (trips < 0 || i < trips) && cond; ++i) {
    if (i >= kMaxUnrolledIterations)
      c.Fail("the loop runs past the unroll bound of " + std::to_string(kMaxUnrolledIterations) +
             " iterations");
    std::vector<TracedValue> in = {HostScalarValue(i, ElemType::kInt64), HostScalarValue(1, ElemType::kBool)};
    in.insert(in.end(), state.begin(), state.end());
    std::vector<TracedValue> out = c.TraceSubgraph("body", in);
    if (out.size() != 1 + num_states + num_scans) c.Fail("the body has an unexpected number of outputs");
    if (!out[0].host) c.Fail("the loop condition did not fold to a host value");
    cond = HostScalar(c, *out[0].host, "the body's condition") != 0;
    for (size_t k = 0; k < num_states; ++k) state[k] = out[1 + k];
    for (size_t k = 0; k < num_scans; ++k) scans[k].push_back(out[1 + num_states + k].array);
  }
  if (i == 0 && num_scans > 0) scan_like = ZeroTripScanLike(c, num_states, num_scans);
  std::vector<mx::array> result;
  for (size_t k = 0; k < num_states; ++k) {
    if (state[k].host) c.SetHostOutput(k, state[k].host);
    result.push_back(state[k].array);
  }
  for (size_t k = 0; k < num_scans; ++k)
    result.push_back(scans[k].empty() ? scan_like[k] : StackIterations(c, scans[k], 0, scans[k][0]));
  return result;
}

// A Scan attribute list (one entry per scan input or output), `fallback` where absent.
std::vector<int64_t> ScanAttr(const Node& node, const char* name, size_t count, int64_t fallback) {
  auto v = node.AttrInts(name);
  if (!v) return std::vector<int64_t>(count, fallback);
  return *v;
}

Claim ClaimScan(const NodeView& v) {
  const SubgraphFacts* facts = v.subgraph("body");
  const Graph* body = v.node().Subgraph("body");
  if (!facts || !body) return Claim::No("no body subgraph");
  const Attribute* m = v.node().Attr("num_scan_inputs");
  if (!m || m->kind != Attribute::Kind::kInt || m->i < 1 || static_cast<size_t>(m->i) > v.num_inputs())
    return Claim::No("num_scan_inputs is missing or out of range");
  const size_t num_scan_in = static_cast<size_t>(m->i), num_states = v.num_inputs() - num_scan_in;
  if (body->inputs.size() != v.num_inputs() || body->outputs.size() != v.num_outputs() ||
      v.num_outputs() < num_states)
    return Claim::No("the body's inputs and outputs do not match the node's");
  const size_t num_scan_out = v.num_outputs() - num_states;
  for (const auto& [attr, count] : {std::pair<const char*, size_t>{"scan_input_directions", num_scan_in},
                                    {"scan_input_axes", num_scan_in},
                                    {"scan_output_directions", num_scan_out},
                                    {"scan_output_axes", num_scan_out}})
    if (ScanAttr(v.node(), attr, count, 0).size() != count)
      return Claim::No(std::string(attr) + " does not have one entry per scan value");
  Claim claim = Claim::Yes();
  if (auto r = AddBodyRoots(v, *facts, {}, claim); !r.empty()) return Claim::No(r);
  claim.fold_reason = "a nested loop condition";
  return claim;
}

int NormalizeAxis(const OpContext& c, int64_t axis, size_t rank) {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) c.Fail("axis " + std::to_string(axis) + " is out of range");
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

// Slice `t` of a scan input along `axis`, the axis removed.
mx::array ScanSlice(const OpContext& c, const mx::array& x, int axis, int t) {
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  start[axis] = t;
  stop[axis] = t + 1;
  return mx::squeeze(mx::slice(x, start, stop, c.stream), axis, c.stream);
}

// How a Scan walks its sequences: per scan input a direction and an axis, per scan output too.
struct ScanSpec {
  std::vector<int64_t> in_dirs, in_axes, out_dirs, out_axes;
};

// Traces the body along the scan inputs `xs` from `states`: the final states, then the stacked
// scan outputs.
std::vector<mx::array> RunScan(const OpContext& c, const std::vector<mx::array>& states,
                               const std::vector<mx::array>& xs, const ScanSpec& spec, size_t num_scan_out) {
  std::vector<int> axes;
  int length = -1;
  for (size_t k = 0; k < xs.size(); ++k) {
    axes.push_back(NormalizeAxis(c, spec.in_axes[k], xs[k].ndim()));
    if (length >= 0 && xs[k].shape(axes[k]) != length) c.Fail("scan inputs have different sequence lengths");
    length = xs[k].shape(axes[k]);
  }
  if (length > kMaxUnrolledIterations)
    c.Fail("the sequence length " + std::to_string(length) + " exceeds the unroll bound");
  std::vector<TracedValue> state;
  for (const auto& s : states) state.push_back({s, nullptr});
  std::vector<std::vector<mx::array>> scans(num_scan_out);
  std::vector<mx::array> like;
  // With no steps the body is still traced once, unused, on zero slices: it gives the shapes.
  for (int t = 0; t < std::max(length, 1); ++t) {
    std::vector<TracedValue> in = state;
    for (size_t k = 0; k < xs.size(); ++k) {
      if (length == 0) {
        mx::Shape shape = xs[k].shape();
        shape.erase(shape.begin() + axes[k]);
        in.push_back({mx::zeros(shape, xs[k].dtype(), c.stream), nullptr});
      } else {
        in.push_back({ScanSlice(c, xs[k], axes[k], spec.in_dirs[k] ? length - 1 - t : t), nullptr});
      }
    }
    std::vector<TracedValue> out = c.TraceSubgraph("body", in);
    if (out.size() != states.size() + num_scan_out) c.Fail("the body has an unexpected number of outputs");
    for (size_t k = 0; k < num_scan_out; ++k)
      (length == 0 ? like : scans[k]).push_back(out[states.size() + k].array);
    if (length == 0) break;
    for (size_t k = 0; k < states.size(); ++k) state[k] = {out[k].array, nullptr};
  }
  std::vector<mx::array> result;
  for (auto& s : state) result.push_back(s.array);
  for (size_t k = 0; k < num_scan_out; ++k) {
    if (spec.out_dirs[k]) std::reverse(scans[k].begin(), scans[k].end());
    const mx::array& one = scans[k].empty() ? like[k] : scans[k][0];
    result.push_back(StackIterations(c, scans[k], NormalizeAxis(c, spec.out_axes[k], one.ndim() + 1), one));
  }
  return result;
}

std::vector<mx::array> TranslateScan(const OpContext& c) {
  const size_t num_scan_in = static_cast<size_t>(c.node.AttrInt("num_scan_inputs", 0));
  const size_t num_states = c.num_inputs() - num_scan_in, num_scan_out = c.num_outputs() - num_states;
  const ScanSpec spec{ScanAttr(c.node, "scan_input_directions", num_scan_in, 0),
                      ScanAttr(c.node, "scan_input_axes", num_scan_in, 0),
                      ScanAttr(c.node, "scan_output_directions", num_scan_out, 0),
                      ScanAttr(c.node, "scan_output_axes", num_scan_out, 0)};
  std::vector<mx::array> states, xs;
  for (size_t k = 0; k < c.num_inputs(); ++k) (k < num_states ? states : xs).push_back(c.input(k));
  return RunScan(c, states, xs, spec, num_scan_out);
}

// Scan-8: input 0 is sequence_lens (declined unless absent), every state and scan value has a
// leading batch axis, and the scan axis is 1. Each batch item is scanned on its own.
Claim ClaimScan8(const NodeView& v) {
  const Graph* body = v.node().Subgraph("body");
  const SubgraphFacts* facts = v.subgraph("body");
  if (!facts || !body) return Claim::No("no body subgraph");
  if (v.has_input(0)) return Claim::No("sequence_lens is not supported (only its absence)");
  const Attribute* m = v.node().Attr("num_scan_inputs");
  if (!m || m->kind != Attribute::Kind::kInt || m->i < 1 || static_cast<size_t>(m->i) + 1 > v.num_inputs())
    return Claim::No("num_scan_inputs is missing or out of range");
  const size_t num_scan_in = static_cast<size_t>(m->i), num_states = v.num_inputs() - 1 - num_scan_in;
  if (body->inputs.size() != v.num_inputs() - 1 || body->outputs.size() != v.num_outputs() ||
      v.num_outputs() < num_states)
    return Claim::No("the body's inputs and outputs do not match the node's");
  if (ScanAttr(v.node(), "directions", num_scan_in, 0).size() != num_scan_in)
    return Claim::No("directions does not have one entry per scan input");
  Claim claim = Claim::Yes();
  if (auto r = AddBodyRoots(v, *facts, {}, claim); !r.empty()) return Claim::No(r);
  claim.fold_reason = "a nested loop condition";
  return claim;
}

std::vector<mx::array> TranslateScan8(const OpContext& c) {
  const size_t num_scan_in = static_cast<size_t>(c.node.AttrInt("num_scan_inputs", 0));
  const size_t num_states = c.num_inputs() - 1 - num_scan_in, num_scan_out = c.num_outputs() - num_states;
  const ScanSpec spec{ScanAttr(c.node, "directions", num_scan_in, 0), std::vector<int64_t>(num_scan_in, 0),
                      std::vector<int64_t>(num_scan_out, 0), std::vector<int64_t>(num_scan_out, 0)};
  const int batch = c.input(1).ndim() ? c.input(1).shape(0) : 0;
  const mx::array& first_scan = c.input(1 + num_states);
  if (batch == 0) c.Fail("an empty batch is not supported");
  if (first_scan.ndim() < 2) c.Fail("a scan input lacks the batch and sequence axes");
  if (static_cast<int64_t>(batch) * first_scan.shape(1) > kMaxUnrolledIterations)
    c.Fail("batch x sequence length exceeds the unroll bound of " + std::to_string(kMaxUnrolledIterations));
  std::vector<std::vector<mx::array>> per_item(c.num_outputs());
  for (int b = 0; b < batch; ++b) {
    std::vector<mx::array> states, xs;
    for (size_t k = 1; k < c.num_inputs(); ++k) {
      const mx::array& x = c.input(k);
      if (x.ndim() == 0 || x.shape(0) != batch) c.Fail("inputs differ in batch size");
      (k <= num_states ? states : xs).push_back(ScanSlice(c, x, 0, b));
    }
    std::vector<mx::array> outs = RunScan(c, states, xs, spec, num_scan_out);
    for (size_t k = 0; k < outs.size(); ++k) per_item[k].push_back(outs[k]);
  }
  std::vector<mx::array> result;
  for (auto& items : per_item) result.push_back(StackIterations(c, items, 0, items[0]));
  return result;
}

}  // namespace

void RegisterLoopScanOps(OpRegistry& r) {
  r.Add({"", "Loop", 1, 23, ClaimLoop, TranslateLoop});
  r.Add({"", "Scan", 8, 8, ClaimScan8, TranslateScan8});
  r.Add({"", "Scan", 9, 23, ClaimScan, TranslateScan});
}

}  // namespace mlx_ep
