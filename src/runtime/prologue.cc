// The prologue of a trace with dynamic dims (docs/dynamic_shapes.md): the nodes that read a
// value of dynamic shape, run uncompiled every run on the real inputs, so exact for every size.
#include <set>
#include <unordered_map>

#include "runtime/plan.h"

namespace mlx_ep {
namespace {

// Ops a prologue may hold: cheap elementwise ops and reductions (it runs uncompiled every run).
bool IsPrologueOp(const PlanNode& pn) {
  static const std::set<std::string> ops = {
      "Cast", "Identity", "Not", "Neg",       "Abs",       "Sign",      "Add",         "Sub",
      "Mul",  "Max",      "Min", "Equal",     "Less",      "Greater",   "LessOrEqual", "GreaterOrEqual",
      "And",  "Or",       "Xor", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",  "ReduceMean"};
  return pn.node.domain.empty() && pn.subplans.empty() && ops.count(pn.node.op_type);
}
constexpr size_t kMaxPrologueNodes = 16;

// Translates prologue node `pn` on `values` (by name; plan constants otherwise).
std::vector<mx::array> RunPrologueNode(const Plan& plan, const PlanNode& pn,
                                       const std::unordered_map<std::string, mx::array>& values,
                                       mx::Stream stream) {
  const std::vector<std::string> all = pn.node.AllInputs();
  std::vector<std::optional<mx::array>> inputs;
  std::vector<const Tensor*> host(all.size(), nullptr);
  for (size_t k = 0; k < all.size(); ++k) {
    if (auto h = plan.host_constants.find(all[k]); h != plan.host_constants.end()) host[k] = h->second.get();
    if (k >= pn.node.inputs.size()) continue;
    if (all[k].empty()) {
      inputs.emplace_back();
    } else if (auto v = values.find(all[k]); v != values.end()) {
      inputs.push_back(v->second);
    } else if (auto c = ConstantView(plan, all[k], stream)) {
      inputs.push_back(*c);
    } else {
      throw DynamicShapeUnsupported("[MlxEp] " + pn.node.Label() + " reads '" + all[k] +
                                    "' from outside the prologue");
    }
  }
  for (size_t k : pn.host_inputs)
    if (!host.at(k))
      throw DynamicShapeUnsupported("[MlxEp] " + pn.node.Label() + " reads '" + all[k] + "' on the host");
  std::vector<ElemType> out_types;
  for (const auto& out : pn.node.outputs) {
    auto t = plan.value_types.find(out);
    out_types.push_back(t == plan.value_types.end() ? ElemType::kUndefined : t->second);
  }
  OpContext ctx(pn.node, std::move(inputs), std::move(host), std::move(out_types), stream);
  std::vector<RuntimeCheck> checks;
  ctx.set_checks(&checks);
  std::vector<mx::array> outs = pn.spec->translate(ctx);
  if (!checks.empty() || outs.size() < pn.node.outputs.size())
    throw DynamicShapeUnsupported("[MlxEp] " + pn.node.Label() + " records runtime checks");
  return outs;
}

}  // namespace

namespace {

// FindPrologue's walk. Every prologue node is translated twice: on the inputs and on
// placeholders whose dynamic dims differ (never evaluated); a value whose shape differs between
// the two is of dynamic shape.
class PrologueFinder {
 public:
  PrologueFinder(const Plan& plan, const DynamicAxes& axes, const std::vector<mx::array>& inputs,
                 mx::Stream stream)
      : plan_(plan), stream_(stream) {
    for (size_t i = 0; i < plan.input_names.size(); ++i) {
      const std::string& name = plan.input_names[i];
      real_.insert_or_assign(name, inputs.at(i));
      mx::Shape shape = inputs[i].shape();
      for (size_t a = 0; a < axes.at(i).size(); ++a)
        if (axes[i][a] >= 0) {
          shape.at(a) += 3 + axes[i][a];
          deps_[name].insert(axes[i][a]);
        }
      if (!deps_.count(name)) {
        probe_.insert_or_assign(name, inputs[i]);
        continue;
      }
      shaped_.insert(name);
      dynamic_inputs_.insert(name);
      probe_.insert_or_assign(name, mx::zeros(shape, inputs[i].dtype(), stream));
    }
  }

  // Node `idx`: nothing to do unless it reads a value of dynamic shape; Shape/Size of a dynamic
  // input are traced (the dims are data); cheap ops join the prologue; anything else fails.
  void Visit(size_t idx) {
    const PlanNode& pn = plan_.nodes[idx];
    const std::vector<std::string> all = pn.node.AllInputs();
    std::set<int> d;
    bool reads_shaped = false;
    for (const auto& in : all) {
      if (!shaped_.count(in)) continue;
      reads_shaped = true;
      d.insert(deps_[in].begin(), deps_[in].end());
    }
    if (!reads_shaped) return;
    auto fail = [&](const std::string& why) {
      throw DynamicShapeUnsupported("[MlxEp] " + pn.node.Label() + " (" + pn.node.op_type + ") " + why, d);
    };
    if (pn.node.domain.empty() && (pn.node.op_type == "Shape" || pn.node.op_type == "Size")) {
      for (const auto& in : all)
        if (shaped_.count(in) && !dynamic_inputs_.count(in))
          fail("reads the shape of a computed value of dynamic shape");
      return;
    }
    if (!IsPrologueOp(pn)) fail("reads a value of dynamic shape");
    if (prologue_.nodes.size() >= kMaxPrologueNodes) fail("would make the prologue too long");
    std::vector<mx::array> r, q;
    try {
      r = RunPrologueNode(plan_, pn, real_, stream_);
      q = RunPrologueNode(plan_, pn, probe_, stream_);
    } catch (const std::exception& e) {  // DynamicShapeUnsupported, or a translation's Fail
      fail(e.what());
    }
    prologue_.nodes.push_back(idx);
    for (size_t k = 0; k < pn.node.outputs.size(); ++k) {
      const std::string& name = pn.node.outputs[k];
      if (name.empty()) continue;
      real_.insert_or_assign(name, r[k]);
      probe_.insert_or_assign(name, q[k]);
      deps_[name] = d;
      if (r[k].shape() != q[k].shape()) {
        shaped_.insert(name);
      } else {
        prologue_.boundary.push_back(name);
        prologue_.shapes.push_back(r[k].shape());
        prologue_.deps.push_back(d);
      }
    }
  }

  Prologue Finish() {
    for (const auto& out : plan_.output_names)
      if (shaped_.count(out))
        throw DynamicShapeUnsupported("[MlxEp] partition output '" + out + "' has a dynamic shape",
                                      deps_[out]);
    return std::move(prologue_);
  }

 private:
  const Plan& plan_;
  mx::Stream stream_;
  std::unordered_map<std::string, mx::array> real_, probe_;
  std::unordered_map<std::string, std::set<int>> deps_;  // value -> the dynamic dims it depends on
  std::set<std::string> shaped_;                         // values of dynamic shape
  std::set<std::string> dynamic_inputs_;
  Prologue prologue_;
};

}  // namespace

Prologue FindPrologue(const Plan& plan, const DynamicAxes& axes, const std::vector<mx::array>& inputs,
                      mx::Stream stream) {
  PrologueFinder finder(plan, axes, inputs, stream);
  for (size_t idx = 0; idx < plan.nodes.size(); ++idx) finder.Visit(idx);
  return finder.Finish();
}

std::vector<mx::array> RunPrologue(const Plan& plan, const Prologue& prologue,
                                   const std::vector<mx::array>& inputs, mx::Stream stream) {
  std::unordered_map<std::string, mx::array> values;
  for (size_t i = 0; i < plan.input_names.size(); ++i)
    values.insert_or_assign(plan.input_names[i], inputs.at(i));
  for (size_t idx : prologue.nodes) {
    const PlanNode& pn = plan.nodes.at(idx);
    std::vector<mx::array> outs = RunPrologueNode(plan, pn, values, stream);
    for (size_t k = 0; k < pn.node.outputs.size(); ++k)
      if (!pn.node.outputs[k].empty()) values.insert_or_assign(pn.node.outputs[k], outs[k]);
  }
  std::vector<mx::array> boundary;
  for (size_t k = 0; k < prologue.boundary.size(); ++k) {
    boundary.push_back(values.at(prologue.boundary[k]));
    if (boundary.back().shape() != prologue.shapes[k])
      throw DynamicShapeUnsupported("[MlxEp] prologue value '" + prologue.boundary[k] + "' changed shape",
                                    prologue.deps[k]);
  }
  return boundary;
}

}  // namespace mlx_ep
