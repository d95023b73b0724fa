#include "partition/partition.h"

#include "common/env.h"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace mlx_ep {
namespace {

// Checks every claim shares: known tensor types MLX can hold on the runtime device.
std::string CheckValueTypes(const Node& node, const Graph& graph) {
  auto check = [&](const std::string& name, const char* what) -> std::string {
    if (name.empty()) return "";
    const ValueInfo* v = graph.Value(name);
    if (!v) return std::string(what) + " '" + name + "' has no type information";
    if (!v->is_tensor) return std::string(what) + " '" + name + "' is not a tensor";
    if (!DeviceSupports(v->type))
      return std::string(what) + " '" + name + "' has type " + ElemName(v->type) +
             ", which MLX does not support on this device";
    return "";
  };
  for (const auto& in : node.AllInputs())
    if (auto r = check(in, "input"); !r.empty()) return r;
  for (const auto& out : node.outputs)
    if (auto r = check(out, "output"); !r.empty()) return r;
  return "";
}

// True for each node whose outputs the trace's host lane can always hold: a claimed node that
// folds from shapes, or from values that are themselves constants or foldable.
std::vector<bool> FoldableNodes(const Graph& graph, const std::vector<size_t>& order,
                                const std::vector<Claim>& claims, const OpRegistry& registry) {
  std::vector<bool> foldable(graph.nodes.size(), false);
  for (size_t v : order) {
    const Node& node = graph.nodes[v];
    if (!claims[v].ok) continue;
    const OpSpec* spec = registry.Find(node.domain, node.op_type, node.since_version);
    if (spec->host_eval == HostEval::kFromShapes) {
      foldable[v] = true;
    } else if (spec->host_eval == HostEval::kFromValues) {
      foldable[v] = std::all_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& in) {
        if (in.empty()) return true;
        const ValueInfo* info = graph.Value(in);
        if (info && info->is_constant_initializer) return true;
        const int p = graph.Producer(in);
        return p >= 0 && foldable[p];
      });
    }
  }
  return foldable;
}

// A graph input that is one integer or bool (a sample rate, a mode flag): worth specialising on.
// ORT reports a scalar with no dims, like a value of unknown shape: both count.
bool IsScalarSetting(const Graph& graph, const std::string& name) {
  const ValueInfo* v = graph.Value(name);
  if (!v || !v->is_tensor || v->is_constant_initializer) return false;
  const bool integral =
      v->type == ElemType::kBool || v->type == ElemType::kInt32 || v->type == ElemType::kInt64;
  if (!integral) return false;
  if (!v->shape) return true;
  return std::all_of(v->shape->begin(), v->shape->end(), [](int64_t d) { return d == 1; });
}

// True for each node whose outputs fold once the scalar settings they derive from are read on
// the host: foldable nodes, and folding ops over those, constants and scalar integer graph
// inputs. A host input a claim lets specialise (an If condition) may come from such a node of
// its own partition.
std::vector<bool> SpecialisableNodes(const Graph& graph, const std::vector<size_t>& order,
                                     const std::vector<Claim>& claims, const std::vector<bool>& foldable,
                                     const OpRegistry& registry) {
  std::vector<bool> result = foldable;
  for (size_t v : order) {
    const Node& node = graph.nodes[v];
    if (result[v] || !claims[v].ok) continue;
    const OpSpec* spec = registry.Find(node.domain, node.op_type, node.since_version);
    if (spec->host_eval != HostEval::kFromValues) continue;
    result[v] = std::all_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& in) {
      if (in.empty()) return true;
      const ValueInfo* info = graph.Value(in);
      if (info && info->is_constant_initializer) return true;
      const int p = graph.Producer(in);
      return p >= 0 ? static_cast<bool>(result[p]) : IsScalarSetting(graph, in);
    });
  }
  return result;
}

std::string Describe(const Node& node) { return node.Label() + " (" + node.op_type + ")"; }

// The host-lane roots of a body value: nothing for constants, the value itself for body inputs
// and outer-scope values, what its producer derived for the rest (nullopt: runtime data).
using Roots = std::optional<std::set<std::string>>;

Roots RootsOf(const Graph& body, const std::unordered_map<std::string, Roots>& produced,
              const std::string& name) {
  if (name.empty()) return std::set<std::string>{};
  if (auto it = produced.find(name); it != produced.end()) return it->second;
  const ValueInfo* v = body.Value(name);
  if (v && v->is_constant_initializer && !v->is_outer_scope) return std::set<std::string>{};
  return std::set<std::string>{name};
}

// Claims every node of a body (recursively, through ClaimNode) and derives which values its
// host lane can hold while the body is traced inline. Fails with the first declined node.
std::optional<SubgraphFacts> AnalyseBody(const Graph& body, const OpRegistry& registry, std::string* reason) {
  SubgraphFacts facts;
  std::unordered_map<std::string, Roots> produced;
  for (size_t v : TopologicalOrder(body)) {
    const Node& node = body.nodes[v];
    const Claim claim = ClaimNode(node, body, registry);
    if (!claim.ok) {
      *reason = "body node " + Describe(node) + " is declined: " + claim.reason;
      return std::nullopt;
    }
    const std::vector<std::string> inputs = node.AllInputs();
    for (size_t k : claim.host_inputs) {
      Roots r = RootsOf(body, produced, inputs.at(k));
      if (!r) {
        *reason = "body node " + Describe(node) + " reads '" + inputs[k] +
                  "' on the host, and it depends on runtime data inside the body";
        return std::nullopt;
      }
      facts.host_roots.insert(r->begin(), r->end());
      if (std::find(claim.fold_inputs.begin(), claim.fold_inputs.end(), k) != claim.fold_inputs.end())
        facts.fold_roots.insert(r->begin(), r->end());
    }
    const OpSpec* spec = registry.Find(node.domain, node.op_type, node.since_version);
    Roots out_roots;
    if (spec->host_eval == HostEval::kFromShapes) {
      out_roots = std::set<std::string>{};
    } else if (spec->host_eval == HostEval::kFromValues) {
      out_roots = std::set<std::string>{};
      for (const auto& in : inputs) {
        Roots r = RootsOf(body, produced, in);
        if (!r) {
          out_roots.reset();
          break;
        }
        out_roots->insert(r->begin(), r->end());
      }
    }
    for (const auto& out : node.outputs)
      if (!out.empty()) produced[out] = out_roots;
  }
  for (const auto& out : body.outputs) facts.output_roots.push_back(RootsOf(body, produced, out));
  return facts;
}

}  // namespace

Claim ClaimNode(const Node& node, const Graph& graph, const OpRegistry& registry) {
  // A user's deny-list, for bisecting a numerical difference or working around a bad translation.
  // (Appended piecewise: GCC 12 warns falsely about `"," + str + ","`.)
  static const std::string declined = [] {
    std::string list(1, ',');
    list.append(EnvString(env::kDeclineOps)).push_back(',');
    return list;
  }();
  std::string op(1, ',');
  op.append(node.op_type).push_back(',');
  if (declined.find(op) != std::string::npos)
    return Claim::No(std::string("declined by ") + env::kDeclineOps);
  const OpSpec* spec = registry.Find(node.domain, node.op_type, node.since_version);
  if (!spec)
    return Claim::No("no MLX translation for " + node.QualifiedOp() + " (opset " +
                     std::to_string(node.since_version) + ")");
  if (auto reason = CheckValueTypes(node, graph); !reason.empty()) return Claim::No(reason);
  try {
    // A node with subgraphs is claimable only when every node of its bodies is.
    std::map<std::string, SubgraphFacts> facts;
    if (node.has_subgraphs && node.subgraphs.empty()) return Claim::No("its subgraphs were not read");
    for (const auto& [attr, body] : node.subgraphs) {
      std::string reason;
      auto f = AnalyseBody(*body, registry, &reason);
      if (!f) return Claim::No("subgraph '" + attr + "': " + reason);
      facts.emplace(attr, std::move(*f));
    }
    return spec->claim(NodeView(node, graph, node.has_subgraphs ? &facts : nullptr));
  } catch (const std::exception& e) {
    return Claim::No(std::string("claim failed: ") + e.what());
  } catch (...) {
    return Claim::No("claim failed with an unknown exception");
  }
}

std::vector<size_t> TopologicalOrder(const Graph& graph) {
  const size_t n = graph.nodes.size();
  std::vector<std::vector<size_t>> consumers(n);
  std::vector<size_t> pending(n, 0);
  for (size_t i = 0; i < n; ++i) {
    std::set<int> producers;
    for (const auto& in : graph.nodes[i].AllInputs())
      if (int p = graph.Producer(in); p >= 0 && static_cast<size_t>(p) != i) producers.insert(p);
    pending[i] = producers.size();
    for (int p : producers) consumers[p].push_back(i);
  }
  std::vector<size_t> order, ready;
  for (size_t i = n; i-- > 0;)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    order.push_back(i);
    for (auto it = consumers[i].rbegin(); it != consumers[i].rend(); ++it)
      if (--pending[*it] == 0) ready.push_back(*it);
  }
  if (order.size() != n) throw std::runtime_error("[MlxEp] graph has a cycle");
  return order;
}

namespace {

// Greedy clustering in topological order. deps_[v] holds every cluster that v depends on through
// any path; joining cluster C is refused when an input comes from outside C but depends on C
// (that path would leave C and come back: not convex).
class Clusterer {
 public:
  Clusterer(const Graph& graph, const std::vector<Claim>& claims, const std::vector<bool>& foldable,
            const std::vector<bool>& specialisable)
      : graph_(graph),
        claims_(claims),
        foldable_(foldable),
        specialisable_(specialisable),
        cluster_of_(graph.nodes.size(), -1),
        deps_(graph.nodes.size()) {}

  void Add(size_t v, std::vector<std::vector<size_t>>& clusters) {
    const std::vector<int> producers = Producers(v);
    for (int p : producers) {
      if (p < 0) continue;
      deps_[v].insert(deps_[p].begin(), deps_[p].end());
      if (cluster_of_[p] >= 0) deps_[v].insert(cluster_of_[p]);
    }
    if (!claims_[v].ok) return;
    // A producer's cluster first; else any cluster the node can join without breaking
    // convexity (independent chains, such as shape arithmetic that starts at Shape(input), join
    // the main cluster instead of becoming partitions of their own).
    int chosen = -1;
    for (int p : producers)
      if (p >= 0 && cluster_of_[p] >= 0 && CanJoin(v, producers, cluster_of_[p])) {
        chosen = cluster_of_[p];
        break;
      }
    for (int c = 0; chosen < 0 && c < static_cast<int>(clusters.size()); ++c)
      if (CanJoin(v, producers, c)) chosen = c;
    if (chosen < 0) {
      chosen = static_cast<int>(clusters.size());
      clusters.emplace_back();
      cluster_deps_.emplace_back();
    }
    for (int d : deps_[v])
      if (d != chosen) cluster_deps_[chosen].insert(d);
    cluster_of_[v] = chosen;
    clusters[chosen].push_back(v);
  }

  const std::vector<int>& cluster_of() const { return cluster_of_; }

 private:
  std::vector<int> Producers(size_t v) const {
    std::vector<int> producers;
    // Implicit inputs (outer-scope values of bodies) count like inputs: for convexity, for
    // host-ness (a claim's host index may name one) and for the fused node's inputs.
    for (const auto& in : graph_.nodes[v].AllInputs()) producers.push_back(graph_.Producer(in));
    return producers;
  }

  bool CanJoin(size_t v, const std::vector<int>& producers, int c) const {
    for (size_t k = 0; k < producers.size(); ++k) {
      const int p = producers[k];
      if (p < 0) continue;
      if (cluster_of_[p] == c) {
        // A host input computed inside the cluster must fold at trace time.
        const auto& host = claims_[v].host_inputs;
        const auto& special = claims_[v].specialise_inputs;
        const bool specialises =
            specialisable_[p] && std::find(special.begin(), special.end(), k) != special.end();
        if (!foldable_[p] && !specialises && std::find(host.begin(), host.end(), k) != host.end())
          return false;
      } else if (deps_[p].count(c)) {
        return false;
      }
    }
    // v would make c depend on every cluster in deps_[v]: none of them may depend on c.
    for (int d : deps_[v])
      if (d != c && DependsOn(d, c)) return false;
    return true;
  }

  // True when cluster `from` depends on cluster `on`, following cluster dependencies transitively.
  bool DependsOn(int from, int on) const {
    std::vector<int> stack = {from};
    std::set<int> seen = {from};
    while (!stack.empty()) {
      int c = stack.back();
      stack.pop_back();
      for (int d : cluster_deps_[c]) {
        if (d == on) return true;
        if (seen.insert(d).second) stack.push_back(d);
      }
    }
    return false;
  }

  const Graph& graph_;
  const std::vector<Claim>& claims_;
  const std::vector<bool>& foldable_;
  const std::vector<bool>& specialisable_;
  std::vector<int> cluster_of_;
  std::vector<std::set<int>> deps_;
  std::vector<std::set<int>> cluster_deps_;  // clusters that some node of c depends on
};

// Why `value` (made by `p`, read by input k of `v`) crosses from one side to the other.
std::string BoundaryReason(const Graph& graph, const std::vector<Claim>& claims,
                           const std::vector<bool>& foldable, int p, size_t v, size_t k) {
  if (!claims[p].ok) return "its producer " + Describe(graph.nodes[p]) + " runs on CPU: " + claims[p].reason;
  if (!claims[v].ok) return "its consumer " + Describe(graph.nodes[v]) + " runs on CPU: " + claims[v].reason;
  const auto& host = claims[v].host_inputs;
  if (!foldable[p] && std::find(host.begin(), host.end(), k) != host.end())
    return Describe(graph.nodes[v]) + " reads it on the host (input " + std::to_string(k) +
           ") and it depends on runtime tensor data, so it is computed in an earlier partition";
  return "joining " + Describe(graph.nodes[v]) + " to the partition of " + Describe(graph.nodes[p]) +
         " would make a path leave that partition and come back (through a node on CPU)";
}

std::vector<Boundary> ExplainBoundaries(const Graph& graph, const std::vector<Claim>& claims,
                                        const std::vector<bool>& foldable,
                                        const std::vector<int>& cluster_of) {
  std::vector<Boundary> boundaries;
  std::set<std::pair<std::string, size_t>> seen;  // (value, consumer)
  for (size_t v = 0; v < graph.nodes.size(); ++v) {
    const std::vector<std::string> inputs = graph.nodes[v].AllInputs();
    for (size_t k = 0; k < inputs.size(); ++k) {
      const int p = graph.Producer(inputs[k]);
      if (p < 0 || cluster_of[p] == cluster_of[v] || !seen.insert({inputs[k], v}).second) continue;
      if (cluster_of[p] < 0 && cluster_of[v] < 0) continue;  // CPU to CPU
      boundaries.push_back({inputs[k], static_cast<size_t>(p), v, cluster_of[p], cluster_of[v],
                            BoundaryReason(graph, claims, foldable, p, v, k)});
    }
  }
  return boundaries;
}

// A claim's fold_inputs must be constants or foldable values; one that depends on runtime data
// declines the node (control-flow nodes never fold, so no other node's foldability changes).
void DeclineUnfoldedInputs(const Graph& graph, const std::vector<bool>& foldable,
                           std::vector<Claim>& claims) {
  for (size_t v = 0; v < graph.nodes.size(); ++v) {
    if (!claims[v].ok) continue;
    const std::vector<std::string> inputs = graph.nodes[v].AllInputs();
    for (size_t k : claims[v].fold_inputs) {
      const std::string& in = inputs.at(k);
      const ValueInfo* info = graph.Value(in);
      const int p = graph.Producer(in);
      if (in.empty() || (info && info->is_constant_initializer) || (p >= 0 && foldable[p])) continue;
      claims[v] = Claim::No(claims[v].fold_reason + ": it depends on '" + in +
                            "', which is runtime data (a data-dependent result)");
      break;
    }
  }
}

}  // namespace

Partitioning PartitionGraph(const Graph& graph, const OpRegistry& registry) {
  const size_t n = graph.nodes.size();
  Partitioning result;
  result.decisions.resize(n);
  std::vector<Claim> claims(n);
  for (size_t i = 0; i < n; ++i) {
    claims[i] = ClaimNode(graph.nodes[i], graph, registry);
    result.decisions[i] = {claims[i].ok, claims[i].reason};
  }
  const std::vector<size_t> order = TopologicalOrder(graph);
  const std::vector<bool> foldable = FoldableNodes(graph, order, claims, registry);
  DeclineUnfoldedInputs(graph, foldable, claims);
  for (size_t i = 0; i < n; ++i) result.decisions[i] = {claims[i].ok, claims[i].reason};
  const std::vector<bool> specialisable = SpecialisableNodes(graph, order, claims, foldable, registry);
  Clusterer clusterer(graph, claims, foldable, specialisable);
  for (size_t v : order) clusterer.Add(v, result.clusters);
  result.boundaries = ExplainBoundaries(graph, claims, foldable, clusterer.cluster_of());
  return result;
}

}  // namespace mlx_ep
