// Building a partition's plan (plan.h): each node claimed again and bound to its translation,
// the constants copied once (merged weights as views, gemv weights transposed), MatMuls merged
// with their siblings and biases, and the values that must be known on the host marked.
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "partition/partition.h"
#include "runtime/matmul_bias.h"
#include "runtime/matmul_siblings.h"
#include "runtime/nbits_siblings.h"
#include "runtime/plan.h"
#include "runtime/weight_layout.h"

namespace mlx_ep {

namespace {

// Marks what must be known on the host: each node's host inputs and, behind a value produced by
// a node of the plan, that node (it must fold) and, unless it folds from shapes alone, its
// inputs in turn. Needed partition inputs are read from ORT's tensors at run time.
void MarkHostValues(Plan& plan, const Graph& graph,
                    const std::unordered_map<std::string, size_t>& input_index) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < plan.nodes.size(); ++i)
    for (const auto& out : plan.nodes[i].node.outputs)
      if (!out.empty()) producer[out] = i;
  std::set<std::string> needed;
  for (const PlanNode& pn : plan.nodes) {
    const std::vector<std::string> inputs = pn.node.AllInputs();
    for (size_t k : pn.host_inputs) needed.insert(inputs.at(k));
  }
  for (size_t i = plan.nodes.size(); i-- > 0;) {
    PlanNode& pn = plan.nodes[i];
    for (const auto& out : pn.node.outputs)
      if (!out.empty() && needed.count(out)) pn.must_fold = true;
    if (!pn.must_fold) continue;
    if (pn.spec->host_eval == HostEval::kNone)
      throw std::invalid_argument("[MlxEp] " + pn.node.Label() + " (" + pn.node.op_type +
                                  ") computes a value needed on the host but cannot be folded");
    if (pn.spec->host_eval == HostEval::kFromValues)
      for (const auto& in : pn.node.inputs)
        if (!in.empty()) needed.insert(in);
  }
  for (const auto& name : needed) {
    if (producer.count(name)) continue;
    if (auto it = input_index.find(name); it != input_index.end()) {
      plan.input_is_host[it->second] = true;
    } else if (const ValueInfo* v = graph.Value(name); v && v->constant) {
      plan.host_constants[name] = v->constant;
    } else if (plan.is_subgraph) {
      // An outer-scope value: the enclosing node's claim listed it as a host input.
    } else {
      throw std::invalid_argument("[MlxEp] value '" + name +
                                  "' must be known on the host but is not available");
    }
  }
}

// Copies the constant `name` into the plan (and its host lane when small), once; a name in
// `gemv_weights` in the layout of weight_layout.h.
void AddConstant(Plan& plan, const Graph& graph, const std::string& name,
                 const std::unordered_map<std::string, size_t>& input_index,
                 const std::unordered_set<std::string>& gemv_weights) {
  const ValueInfo* v = graph.Value(name);
  if (!v || !v->constant || input_index.count(name) || plan.constants.count(name)) return;
  if (plan.merged_members.count(name) || plan.merged_rows.count(name)) return;  // views (ConstantView)
  // The snapshot's copy, not a second one (or the transposed copy instead of the device's).
  const bool transposed = gemv_weights.count(name) > 0;
  plan.constants.emplace(name, transposed ? GemvLayout(*v->constant) : ShareArray(v->constant));
  if (transposed) plan.transposed_constants.insert(name);
  if (v->constant->NumElements() <= kMaxFoldedElements) plan.host_constants[name] = v->constant;
}

Plan BuildPlanOf(const Graph& graph, const std::string& name, std::vector<std::string> input_names,
                 std::vector<std::string> output_names, const OpRegistry& registry, bool is_subgraph) {
  Plan plan;
  plan.name = name;
  plan.is_subgraph = is_subgraph;
  plan.input_names = std::move(input_names);
  plan.output_names = std::move(output_names);
  plan.input_is_host.assign(plan.input_names.size(), false);

  std::unordered_map<std::string, size_t> input_index;
  for (size_t i = 0; i < plan.input_names.size(); ++i) input_index[plan.input_names[i]] = i;
  std::unordered_set<std::string> gemv_weights;
  if (GemvWeightsFor(graph)) gemv_weights = ProductOnlyWeights(graph);
  for (const auto& out : plan.output_names) gemv_weights.erase(out);
  const std::unordered_map<size_t, MatmulBias> biases = FindMatmulBiases(graph, plan.output_names);
  const std::unordered_map<size_t, MergedColumns> merged =
      AddMergedWeights(plan, graph, gemv_weights, biases);
  const std::unordered_map<size_t, MergedNBits> merged_nbits = AddMergedNBits(plan, graph);
  // The Adds whose MatMul may add their bias (a merged one only with its group's biases).
  std::unordered_map<size_t, std::string> bias_added_to;
  for (const auto& [mm, b] : biases)
    if (auto m = merged.find(mm); m == merged.end() || !m->second.bias.empty())
      bias_added_to[b.add] = graph.nodes[mm].outputs[0];

  for (size_t idx : TopologicalOrder(graph)) {
    const Node& node = graph.nodes[idx];
    Claim claim = ClaimNode(node, graph, registry);
    if (!claim.ok)
      throw std::invalid_argument("[MlxEp] " + node.Label() + " (" + node.op_type +
                                  ") can no longer be claimed: " + claim.reason);
    PlanNode pn;
    pn.node = node;
    pn.spec = registry.Find(node.domain, node.op_type, node.since_version);
    pn.host_inputs = claim.host_inputs;
    if (auto m = merged.find(idx); m != merged.end()) {
      pn.merged = m->second;
    } else if (auto q = merged_nbits.find(idx); q != merged_nbits.end()) {
      pn.merged_nbits = q->second;
    } else if (auto b = biases.find(idx); b != biases.end()) {
      pn.bias = b->second.bias;
    }
    if (auto a = bias_added_to.find(idx); a != bias_added_to.end()) pn.bias_added_to = a->second;
    // Bodies become plans of their own, with their initializers as constants.
    for (const auto& [attr, body] : node.subgraphs)
      pn.subplans[attr] = std::make_shared<const Plan>(BuildPlanOf(
          *body, name + "/" + node.Label() + "/" + attr, body->inputs, body->outputs, registry, true));
    for (const auto& out : node.outputs)
      if (const ValueInfo* v = graph.Value(out)) plan.value_types[out] = v->type;
    // Implicit inputs too: the bodies read this graph's constants by name.
    for (const auto& in : node.AllInputs()) AddConstant(plan, graph, in, input_index, gemv_weights);
    plan.nodes.push_back(std::move(pn));
  }
  for (const auto& out : plan.output_names) AddConstant(plan, graph, out, input_index, gemv_weights);
  MarkHostValues(plan, graph, input_index);
  for (const auto& out : plan.output_names) {
    const ValueInfo* v = graph.Value(out);
    if (!v) throw std::invalid_argument("[MlxEp] partition output '" + out + "' has no type");
    plan.output_types.push_back(v->type);
  }
  return plan;
}

}  // namespace

std::optional<mx::array> ConstantView(const Plan& plan, const std::string& name, mx::Stream stream) {
  if (auto m = plan.merged_members.find(name); m != plan.merged_members.end()) {
    // Its columns of the merged weight (only what does not take the merged product reads this).
    const mx::array all = *ConstantView(plan, m->second.weight, stream);
    return mx::slice(all, {0, static_cast<int>(m->second.column)},
                     {all.shape(0), static_cast<int>(m->second.column + m->second.width)}, stream);
  }
  if (auto r = plan.merged_rows.find(name); r != plan.merged_rows.end()) {
    const mx::array all = *ConstantView(plan, r->second.constant, stream);
    mx::Shape start(all.ndim(), 0), stop = all.shape();
    start[0] = static_cast<int>(r->second.begin);
    stop[0] = static_cast<int>(r->second.end);
    return mx::slice(all, start, stop, stream);
  }
  auto it = plan.constants.find(name);
  if (it == plan.constants.end()) return std::nullopt;
  // A Transpose view of the [N, K] array: the trace's constant folding evaluates it, sharing the
  // buffer, so a run reads a constant with the transposed strides.
  if (plan.transposed_constants.count(name)) return mx::transpose(it->second, {1, 0}, stream);
  return it->second;
}

Plan BuildPlan(const Graph& graph, const std::string& name, std::vector<std::string> input_names,
               std::vector<std::string> output_names, const OpRegistry& registry) {
  return BuildPlanOf(graph, name, std::move(input_names), std::move(output_names), registry, false);
}

}  // namespace mlx_ep
