// If: the branch taken is chosen while tracing (the condition is a host value: a constant, a
// folded shape computation, or a partition input the compiled function is specialised on) and
// traced inline into the enclosing MLX function. See docs/control_flow.md.
#include <algorithm>
#include <cstring>

#include "ops/control_flow_internal.h"
#include "ops/registry.h"

namespace mlx_ep {

void AddHostInput(Claim& claim, size_t index, bool must_fold) {
  auto add = [index](std::vector<size_t>& list) {
    if (std::find(list.begin(), list.end(), index) == list.end()) list.push_back(index);
  };
  add(claim.host_inputs);
  if (must_fold) add(claim.fold_inputs);
}

std::string AddHostRoots(const NodeView& view, const std::set<std::string>& roots,
                         const std::set<std::string>& body_inputs, const char* what, Claim& claim,
                         bool must_fold) {
  const Node& node = view.node();
  for (const auto& root : roots) {
    if (body_inputs.count(root)) continue;
    auto it = std::find(node.implicit_inputs.begin(), node.implicit_inputs.end(), root);
    if (it == node.implicit_inputs.end())
      return std::string(what) + " depends on '" + root + "', which is runtime data inside the body";
    AddHostInput(claim, node.inputs.size() + static_cast<size_t>(it - node.implicit_inputs.begin()),
                 must_fold);
  }
  return "";
}

std::string AddBodyRoots(const NodeView& view, const SubgraphFacts& facts,
                         const std::set<std::string>& body_inputs, Claim& claim) {
  if (auto r = AddHostRoots(view, facts.host_roots, body_inputs, "a value the body reads on the host", claim);
      !r.empty())
    return r;
  return AddHostRoots(view, facts.fold_roots, body_inputs, "a value the body reads on the host", claim, true);
}

TracedValue HostScalarValue(int64_t v, ElemType type) {
  auto t = std::make_shared<Tensor>();
  t->type = type;
  if (type == ElemType::kBool) {
    t->bytes.assign(1, v ? 1 : 0);
  } else {
    t->bytes.resize(sizeof(int64_t));
    std::memcpy(t->bytes.data(), &v, sizeof(int64_t));
  }
  return {ToArray(*t), t};
}

mx::array StackIterations(const OpContext& c, const std::vector<mx::array>& steps, int axis,
                          const mx::array& empty_like) {
  if (steps.empty()) {
    mx::Shape shape = empty_like.shape();
    shape.insert(shape.begin() + axis, 0);
    return mx::zeros(shape, empty_like.dtype(), c.stream);
  }
  for (const auto& s : steps)
    if (s.shape() != steps[0].shape() || s.dtype() != steps[0].dtype())
      c.Fail("scan outputs differ in shape or type between iterations");
  return mx::stack(steps, axis, c.stream);
}

namespace {

Claim ClaimIf(const NodeView& v) {
  if (v.input_type(0) != ElemType::kBool) return Claim::No("the condition is not a bool tensor");
  Claim claim = Claim::Yes({0});
  for (const char* attr : {"then_branch", "else_branch"}) {
    const SubgraphFacts* facts = v.subgraph(attr);
    if (!facts) return Claim::No(std::string("no ") + attr + " subgraph");
    const Graph* body = v.node().Subgraph(attr);
    if (body->outputs.size() != v.num_outputs())
      return Claim::No(std::string(attr) + " has a different number of outputs than the node");
    if (auto r = AddBodyRoots(v, *facts, {}, claim); !r.empty()) return Claim::No(r);
  }
  claim.fold_reason = "a nested loop condition";
  claim.specialise_inputs = {0};  // one compiled function per value of the settings it folds from
  return claim;
}

std::vector<mx::array> TranslateIf(const OpContext& c) {
  const bool cond = HostScalar(c, c.host(0), "the If condition") != 0;
  std::vector<TracedValue> outs = c.TraceSubgraph(cond ? "then_branch" : "else_branch", {});
  if (outs.size() != c.num_outputs()) c.Fail("the branch has a different number of outputs");
  std::vector<mx::array> result;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (outs[k].array.dtype() != c.output_dtype(k))
      c.Fail("branch output " + std::to_string(k) + " has another type");
    if (outs[k].host) c.SetHostOutput(k, outs[k].host);
    result.push_back(outs[k].array);
  }
  return result;
}

}  // namespace

void RegisterLoopScanOps(OpRegistry& r);

void RegisterControlFlowOps(OpRegistry& r) {
  r.Add({"", "If", 1, 23, ClaimIf, TranslateIf});
  RegisterLoopScanOps(r);
}

}  // namespace mlx_ep
