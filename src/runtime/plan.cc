#include "runtime/plan.h"

#include <sstream>
#include <stdexcept>

#include "partition/partition.h"

namespace mlx_ep {
namespace {

std::string ShapeString(const mx::Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  return os.str() + ']';
}

// Catches translation bugs at the node that has them, not as a wrong number downstream.
void CheckOutput(const Plan& plan, const PlanNode& pn, size_t k, const mx::array& a) {
  const std::string& name = pn.node.outputs[k];
  auto t = plan.value_types.find(name);
  if (t != plan.value_types.end() && FromMlxDtype(a.dtype()) != t->second)
    throw std::logic_error("[MlxEp][" + pn.node.op_type + "] " + pn.node.Label() + ": output " +
                           std::to_string(k) + " is " + ElemName(FromMlxDtype(a.dtype())) + ", expected " +
                           ElemName(t->second));
  auto s = plan.value_shapes.find(name);
  if (s != plan.value_shapes.end() && mx::Shape(s->second.begin(), s->second.end()) != a.shape())
    throw std::logic_error("[MlxEp][" + pn.node.op_type + "] " + pn.node.Label() + ": output " +
                           std::to_string(k) + " has shape " + ShapeString(a.shape()) +
                           ", ORT expects a different static shape");
}

}  // namespace

Plan BuildPlan(const Graph& graph, const std::string& name, std::vector<std::string> input_names,
               std::vector<std::string> output_names, const OpRegistry& registry) {
  Plan plan;
  plan.name = name;
  plan.input_names = std::move(input_names);
  plan.output_names = std::move(output_names);
  plan.input_is_host.assign(plan.input_names.size(), false);

  std::unordered_map<std::string, size_t> input_index;
  for (size_t i = 0; i < plan.input_names.size(); ++i) input_index[plan.input_names[i]] = i;

  for (size_t idx : TopologicalOrder(graph)) {
    const Node& node = graph.nodes[idx];
    Claim claim = ClaimNode(node, graph, registry);
    if (!claim.ok)
      throw std::invalid_argument("[MlxEp] " + node.Label() + " (" + node.op_type +
                                  ") can no longer be claimed: " + claim.reason);
    PlanNode pn{node, registry.Find(node.domain, node.op_type, node.since_version), claim.host_inputs};
    for (size_t k : claim.host_inputs) {
      const std::string& in = node.inputs.at(k);
      if (auto it = input_index.find(in); it != input_index.end()) {
        plan.input_is_host[it->second] = true;
      } else if (const ValueInfo* v = graph.Value(in); v && v->constant) {
        plan.host_constants[in] = v->constant;
      } else {
        throw std::invalid_argument("[MlxEp] " + node.Label() + ": input '" + in +
                                    "' must be known on the host but is computed inside the partition");
      }
    }
    for (const auto& out : node.outputs) {
      const ValueInfo* v = graph.Value(out);
      if (!v) continue;
      plan.value_types[out] = v->type;
      if (v->shape && std::all_of(v->shape->begin(), v->shape->end(), [](int64_t d) { return d >= 0; }))
        plan.value_shapes[out] = *v->shape;
    }
    for (const auto& in : node.inputs) {
      const ValueInfo* v = graph.Value(in);
      if (v && v->constant && !input_index.count(in) && !plan.constants.count(in))
        plan.constants.emplace(in, ToArray(*v->constant));
    }
    plan.nodes.push_back(std::move(pn));
  }
  for (const auto& out : plan.output_names) {
    const ValueInfo* v = graph.Value(out);
    if (!v) throw std::invalid_argument("[MlxEp] partition output '" + out + "' has no type");
    plan.output_types.push_back(v->type);
  }
  return plan;
}

std::vector<mx::array> TracePlan(const Plan& plan, const std::vector<mx::array>& inputs,
                                 const std::vector<const Tensor*>& host_inputs, mx::Stream stream,
                                 bool* saw_empty) {
  auto note_size = [saw_empty](const mx::array& a) {
    if (saw_empty && a.size() == 0) *saw_empty = true;
  };
  for (const auto& a : inputs) note_size(a);
  std::unordered_map<std::string, mx::array> values;
  std::unordered_map<std::string, const Tensor*> host_values;
  for (const auto& [name, t] : plan.host_constants) host_values[name] = t.get();
  for (size_t i = 0; i < plan.input_names.size(); ++i) {
    values.insert_or_assign(plan.input_names[i], inputs.at(i));
    if (host_inputs.at(i)) host_values[plan.input_names[i]] = host_inputs[i];
  }
  auto lookup = [&](const std::string& name) -> std::optional<mx::array> {
    if (name.empty()) return std::nullopt;
    if (auto it = values.find(name); it != values.end()) return it->second;
    if (auto it = plan.constants.find(name); it != plan.constants.end()) return it->second;
    throw std::logic_error("[MlxEp] value '" + name + "' is not available in partition " + plan.name);
  };

  for (const PlanNode& pn : plan.nodes) {
    std::vector<std::optional<mx::array>> node_inputs;
    std::vector<const Tensor*> node_host(pn.node.inputs.size(), nullptr);
    for (const auto& in : pn.node.inputs) node_inputs.push_back(lookup(in));
    for (size_t k : pn.host_inputs) node_host[k] = host_values.at(pn.node.inputs[k]);
    std::vector<ElemType> out_types;
    for (const auto& out : pn.node.outputs) {
      auto t = plan.value_types.find(out);
      out_types.push_back(t == plan.value_types.end() ? ElemType::kUndefined : t->second);
    }
    OpContext ctx(pn.node, std::move(node_inputs), std::move(node_host), std::move(out_types), stream);
    std::vector<mx::array> outs = pn.spec->translate(ctx);
    if (outs.size() < pn.node.outputs.size()) {
      // Trailing optional outputs may be left out only when unused.
      for (size_t k = outs.size(); k < pn.node.outputs.size(); ++k)
        if (!pn.node.outputs[k].empty())
          throw std::logic_error("[MlxEp][" + pn.node.op_type + "] " + pn.node.Label() +
                                 ": translation produced no output " + std::to_string(k));
    }
    for (size_t k = 0; k < pn.node.outputs.size() && k < outs.size(); ++k) {
      if (pn.node.outputs[k].empty()) continue;
      CheckOutput(plan, pn, k, outs[k]);
      note_size(outs[k]);
      values.insert_or_assign(pn.node.outputs[k], outs[k]);
    }
  }
  std::vector<mx::array> outputs;
  for (const auto& name : plan.output_names) outputs.push_back(mx::contiguous(*lookup(name), false, stream));
  return outputs;
}

}  // namespace mlx_ep
