#include "runtime/plan.h"

#include <set>
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

}  // namespace

namespace {

// Copies the constant `name` into the plan (and its host lane when small), once.
void AddConstant(Plan& plan, const Graph& graph, const std::string& name,
                 const std::unordered_map<std::string, size_t>& input_index) {
  const ValueInfo* v = graph.Value(name);
  if (!v || !v->constant || input_index.count(name) || plan.constants.count(name)) return;
  plan.constants.emplace(name, ToArray(*v->constant));
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

  for (size_t idx : TopologicalOrder(graph)) {
    const Node& node = graph.nodes[idx];
    Claim claim = ClaimNode(node, graph, registry);
    if (!claim.ok)
      throw std::invalid_argument("[MlxEp] " + node.Label() + " (" + node.op_type +
                                  ") can no longer be claimed: " + claim.reason);
    PlanNode pn{node, registry.Find(node.domain, node.op_type, node.since_version), claim.host_inputs, {}};
    // Bodies become plans of their own, with their initializers as constants.
    for (const auto& [attr, body] : node.subgraphs)
      pn.subplans[attr] = std::make_shared<const Plan>(BuildPlanOf(
          *body, name + "/" + node.Label() + "/" + attr, body->inputs, body->outputs, registry, true));
    for (const auto& out : node.outputs) {
      const ValueInfo* v = graph.Value(out);
      if (!v) continue;
      plan.value_types[out] = v->type;
      if (v->shape && std::all_of(v->shape->begin(), v->shape->end(), [](int64_t d) { return d >= 0; }))
        plan.value_shapes[out] = *v->shape;
    }
    // Implicit inputs too: the bodies read this graph's constants by name.
    for (const auto& in : node.AllInputs()) AddConstant(plan, graph, in, input_index);
    plan.nodes.push_back(std::move(pn));
  }
  for (const auto& out : plan.output_names) AddConstant(plan, graph, out, input_index);
  MarkHostValues(plan, graph, input_index);
  for (const auto& out : plan.output_names) {
    const ValueInfo* v = graph.Value(out);
    if (!v) throw std::invalid_argument("[MlxEp] partition output '" + out + "' has no type");
    plan.output_types.push_back(v->type);
  }
  return plan;
}

}  // namespace

Plan BuildPlan(const Graph& graph, const std::string& name, std::vector<std::string> input_names,
               std::vector<std::string> output_names, const OpRegistry& registry) {
  return BuildPlanOf(graph, name, std::move(input_names), std::move(output_names), registry, false);
}

namespace {

// A row-contiguous host copy of an array that does not depend on the traced inputs.
std::shared_ptr<const Tensor> ToHostTensor(const mx::array& a, mx::Stream stream) {
  mx::array c = mx::contiguous(a, false, stream);
  mx::eval(c);
  auto t = std::make_shared<Tensor>();
  t->type = FromMlxDtype(c.dtype());
  t->shape.assign(c.shape().begin(), c.shape().end());
  const auto* p = c.data<uint8_t>();
  t->bytes.assign(p, p + c.nbytes());
  return t;
}

// One trace of a plan: every value has an MLX array and, where it is known while tracing, a host
// value (the host lane). Nodes whose inputs are all on the host lane fold.
class PlanTrace {
 public:
  PlanTrace(const Plan& plan, mx::Stream stream, TraceInfo* info, const PlanTrace* parent = nullptr)
      : plan_(plan),
        stream_(stream),
        host_stream_(mx::default_stream(mx::Device::cpu)),
        info_(info),
        parent_(parent) {
    for (const auto& [name, t] : plan.host_constants) host_[name] = t;
  }

  // A body's inputs: arrays and, where the enclosing translation knows them, host values.
  void BindTraced(const std::vector<TracedValue>& inputs) {
    if (inputs.size() != plan_.input_names.size())
      throw std::invalid_argument("[MlxEp] subgraph " + plan_.name + " takes " +
                                  std::to_string(plan_.input_names.size()) + " inputs, got " +
                                  std::to_string(inputs.size()));
    for (size_t i = 0; i < inputs.size(); ++i) {
      Note(inputs[i].array);
      values_.insert_or_assign(plan_.input_names[i], inputs[i].array);
      if (inputs[i].host) host_[plan_.input_names[i]] = inputs[i].host;
    }
  }

  std::vector<TracedValue> TracedOutputs() const {
    std::vector<TracedValue> outputs;
    for (const auto& name : plan_.output_names) outputs.push_back({*Array(name), Host(name)});
    return outputs;
  }

  void BindInputs(const std::vector<mx::array>& inputs, const std::vector<const Tensor*>& host) {
    for (size_t i = 0; i < plan_.input_names.size(); ++i) {
      Note(inputs.at(i));
      values_.insert_or_assign(plan_.input_names[i], inputs[i]);
      // Non-owning: the runner keeps host inputs alive as long as the traced function.
      if (host.at(i))
        host_[plan_.input_names[i]] = std::shared_ptr<const Tensor>(std::shared_ptr<void>(), host[i]);
    }
  }

  void Run(const PlanNode& pn) {
    bool fold = CanFold(pn);
    if (pn.must_fold && !fold)
      throw std::logic_error("[MlxEp] " + pn.node.Label() +
                             ": an input has no host value, so the node cannot fold");
    std::optional<OpContext> ctx(Context(pn, fold));
    std::vector<mx::array> outs = pn.spec->translate(*ctx);
    if (fold && !pn.must_fold && TooLargeToFold(outs)) {
      // A large value nobody needs on the host stays an MLX computation (a broadcast full()
      // is cheaper than a dense constant); nothing was evaluated yet.
      fold = false;
      ctx.emplace(Context(pn, false));
      outs = pn.spec->translate(*ctx);
    }
    const auto& host_outputs = ctx->host_outputs();
    CheckOutputCount(pn, outs);
    if (fold && info_) ++info_->folded;
    for (size_t k = 0; k < pn.node.outputs.size() && k < outs.size(); ++k) {
      const std::string& name = pn.node.outputs[k];
      if (name.empty()) continue;
      if (fold) {
        auto host = ToHostTensor(outs[k], host_stream_);
        outs[k] = ToArray(*host);  // a constant of the traced graph
        host_[name] = std::move(host);
      } else if (k < host_outputs.size() && host_outputs[k]) {
        host_[name] = host_outputs[k];  // a body computed it on its host lane
      }
      CheckOutput(plan_, pn, k, outs[k]);
      Note(outs[k]);
      values_.insert_or_assign(name, outs[k]);
    }
  }

  std::vector<mx::array> Outputs() {
    std::vector<mx::array> outputs;
    for (const auto& name : plan_.output_names)
      outputs.push_back(mx::contiguous(*Array(name), false, stream_));
    return outputs;
  }

 private:
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
                                     const std::vector<TracedValue>& inputs) const {
    auto it = pn.subplans.find(attr);
    if (it == pn.subplans.end())
      throw std::logic_error("[MlxEp] " + pn.node.Label() + " has no subgraph '" + attr + "'");
    PlanTrace body(*it->second, stream_, info_, this);
    body.BindTraced(inputs);
    for (const PlanNode& node : it->second->nodes) body.Run(node);
    return body.TracedOutputs();
  }

  // The node's context. A folding node reads host values (as CPU arrays) and runs on MLX's
  // CPU device, so nothing of it is traced; Shape and Size read only their inputs' shapes.
  OpContext Context(const PlanNode& pn, bool fold) {
    const bool from_values = fold && pn.spec->host_eval == HostEval::kFromValues;
    const std::vector<std::string> all_inputs = pn.node.AllInputs();
    std::vector<std::optional<mx::array>> inputs;
    std::vector<const Tensor*> host(all_inputs.size(), nullptr);
    for (size_t k = 0; k < all_inputs.size(); ++k) {
      std::shared_ptr<const Tensor> h = Host(all_inputs[k]);
      host[k] = h.get();  // kept alive by host_ (here or in an enclosing trace)
      if (k < pn.node.inputs.size())
        inputs.push_back(from_values && h ? std::optional<mx::array>(ToArray(*h)) : Array(all_inputs[k]));
    }
    for (size_t k : pn.host_inputs)
      if (!host.at(k))
        throw std::logic_error("[MlxEp] " + pn.node.Label() + ": input '" + all_inputs[k] +
                               "' has no host value in partition " + plan_.name);
    std::vector<ElemType> out_types;
    for (const auto& out : pn.node.outputs) {
      auto t = plan_.value_types.find(out);
      out_types.push_back(t == plan_.value_types.end() ? ElemType::kUndefined : t->second);
    }
    OpContext ctx(pn.node, std::move(inputs), std::move(host), std::move(out_types),
                  fold ? host_stream_ : stream_);
    if (!pn.subplans.empty())
      ctx.set_subgraph_tracer([this, &pn](const std::string& attr, const std::vector<TracedValue>& in) {
        return TraceBody(pn, attr, in);
      });
    return ctx;
  }

  std::optional<mx::array> Array(const std::string& name) const {
    if (name.empty()) return std::nullopt;
    if (auto it = values_.find(name); it != values_.end()) return it->second;
    if (auto it = plan_.constants.find(name); it != plan_.constants.end()) return it->second;
    if (parent_) return parent_->Array(name);
    throw std::logic_error("[MlxEp] value '" + name + "' is not available in partition " + plan_.name);
  }

  static bool TooLargeToFold(const std::vector<mx::array>& outs) {
    return std::any_of(outs.begin(), outs.end(), [](const mx::array& a) {
      return static_cast<int64_t>(a.size()) > kMaxFoldedElements;
    });
  }

  void Note(const mx::array& a) {
    if (info_ && a.size() == 0) info_->saw_empty = true;
  }

  static void CheckOutputCount(const PlanNode& pn, const std::vector<mx::array>& outs) {
    // Trailing optional outputs may be left out only when unused.
    for (size_t k = outs.size(); k < pn.node.outputs.size(); ++k)
      if (!pn.node.outputs[k].empty())
        throw std::logic_error("[MlxEp][" + pn.node.op_type + "] " + pn.node.Label() +
                               ": translation produced no output " + std::to_string(k));
  }

  const Plan& plan_;
  mx::Stream stream_;
  mx::Stream host_stream_;
  TraceInfo* info_;
  const PlanTrace* parent_;
  std::unordered_map<std::string, mx::array> values_;
  std::unordered_map<std::string, std::shared_ptr<const Tensor>> host_;
};

}  // namespace

std::vector<mx::array> TracePlan(const Plan& plan, const std::vector<mx::array>& inputs,
                                 const std::vector<const Tensor*>& host_inputs, mx::Stream stream,
                                 TraceInfo* info) {
  PlanTrace trace(plan, stream, info);
  trace.BindInputs(inputs, host_inputs);
  for (const PlanNode& pn : plan.nodes) trace.Run(pn);
  return trace.Outputs();
}

}  // namespace mlx_ep
