#include "partition/partition.h"

#include "common/env.h"

#include <algorithm>
#include <exception>
#include <set>

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
  for (const auto& in : node.inputs)
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
  if (node.has_subgraphs) return Claim::No("nodes with subgraphs are not supported yet");
  if (auto reason = CheckValueTypes(node, graph); !reason.empty()) return Claim::No(reason);
  try {
    return spec->claim(NodeView(node, graph));
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
    for (const auto& in : graph.nodes[i].inputs)
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
  Clusterer(const Graph& graph, const std::vector<Claim>& claims, const std::vector<bool>& foldable)
      : graph_(graph),
        claims_(claims),
        foldable_(foldable),
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
    for (const auto& in : graph_.nodes[v].inputs) producers.push_back(graph_.Producer(in));
    return producers;
  }

  bool CanJoin(size_t v, const std::vector<int>& producers, int c) const {
    for (size_t k = 0; k < producers.size(); ++k) {
      const int p = producers[k];
      if (p < 0) continue;
      if (cluster_of_[p] == c) {
        // A host input computed inside the cluster must fold at trace time.
        const auto& host = claims_[v].host_inputs;
        if (!foldable_[p] && std::find(host.begin(), host.end(), k) != host.end()) return false;
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
  std::vector<int> cluster_of_;
  std::vector<std::set<int>> deps_;
  std::vector<std::set<int>> cluster_deps_;  // clusters that some node of c depends on
};

std::string Describe(const Node& node) { return node.Label() + " (" + node.op_type + ")"; }

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
    const Node& node = graph.nodes[v];
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      const int p = graph.Producer(node.inputs[k]);
      if (p < 0 || cluster_of[p] == cluster_of[v] || !seen.insert({node.inputs[k], v}).second) continue;
      if (cluster_of[p] < 0 && cluster_of[v] < 0) continue;  // CPU to CPU
      boundaries.push_back({node.inputs[k], static_cast<size_t>(p), v, cluster_of[p], cluster_of[v],
                            BoundaryReason(graph, claims, foldable, p, v, k)});
    }
  }
  return boundaries;
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
  Clusterer clusterer(graph, claims, foldable);
  for (size_t v : order) clusterer.Add(v, result.clusters);
  result.boundaries = ExplainBoundaries(graph, claims, foldable, clusterer.cluster_of());
  return result;
}

}  // namespace mlx_ep
