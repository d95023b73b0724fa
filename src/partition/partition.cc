#include "partition/partition.h"

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

}  // namespace

Claim ClaimNode(const Node& node, const Graph& graph, const OpRegistry& registry) {
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

Partitioning PartitionGraph(const Graph& graph, const OpRegistry& registry) {
  const size_t n = graph.nodes.size();
  Partitioning result;
  result.decisions.resize(n);
  std::vector<Claim> claims(n);
  for (size_t i = 0; i < n; ++i) {
    claims[i] = ClaimNode(graph.nodes[i], graph, registry);
    result.decisions[i] = {claims[i].ok, claims[i].reason};
  }

  // Greedy clustering in topological order. deps[v] holds every cluster that v depends on
  // through any path; joining cluster C is refused when an input comes from outside C but
  // depends on C (that path would leave C and come back: not convex).
  std::vector<int> cluster_of(n, -1);
  std::vector<std::set<int>> deps(n);
  // cluster_deps[c]: the clusters that some node of c depends on (directly or through any path).
  std::vector<std::set<int>> cluster_deps;
  // True when cluster `from` depends on cluster `on`, following cluster dependencies transitively.
  auto depends_on = [&](int from, int on) {
    std::vector<int> stack = {from};
    std::set<int> seen = {from};
    while (!stack.empty()) {
      int c = stack.back();
      stack.pop_back();
      for (int d : cluster_deps[c]) {
        if (d == on) return true;
        if (seen.insert(d).second) stack.push_back(d);
      }
    }
    return false;
  };
  for (size_t v : TopologicalOrder(graph)) {
    const Node& node = graph.nodes[v];
    std::vector<int> producers(node.inputs.size(), -1);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      producers[k] = graph.Producer(node.inputs[k]);
      if (producers[k] < 0) continue;
      const auto& pd = deps[producers[k]];
      deps[v].insert(pd.begin(), pd.end());
      if (cluster_of[producers[k]] >= 0) deps[v].insert(cluster_of[producers[k]]);
    }
    if (!claims[v].ok) continue;

    auto can_join = [&](int c) {
      for (size_t k = 0; k < producers.size(); ++k) {
        const int p = producers[k];
        if (p < 0) continue;
        if (cluster_of[p] == c) {
          const auto& host = claims[v].host_inputs;
          if (std::find(host.begin(), host.end(), k) != host.end()) return false;
        } else if (deps[p].count(c)) {
          return false;
        }
      }
      // v would make c depend on every cluster in deps[v]: none of them may depend on c.
      for (int d : deps[v])
        if (d != c && depends_on(d, c)) return false;
      return true;
    };
    int chosen = -1;
    for (int p : producers)
      if (p >= 0 && cluster_of[p] >= 0 && can_join(cluster_of[p])) {
        chosen = cluster_of[p];
        break;
      }
    if (chosen < 0) {
      chosen = static_cast<int>(result.clusters.size());
      result.clusters.emplace_back();
      cluster_deps.emplace_back();
    }
    for (int d : deps[v])
      if (d != chosen) cluster_deps[chosen].insert(d);
    cluster_of[v] = chosen;
    result.clusters[chosen].push_back(v);
  }
  return result;
}

}  // namespace mlx_ep
