// MatMuls on one input as one product (matmul_siblings.h).
#include "runtime/matmul_siblings.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "common/env.h"
#include "runtime/weight_layout.h"

namespace mlx_ep {

bool MergeMatmulsEnabled() {
  static const bool on = EnvString(env::kMergeMatmuls) != "0";
  return on;
}

std::vector<MatmulSiblings> FindMatmulSiblings(const Graph& graph, const std::vector<std::string>& outputs) {
  std::unordered_map<std::string, int> readers = graph.ReaderCounts(outputs);
  auto floating = [](ElemType t) {
    return t == ElemType::kFloat || t == ElemType::kFloat16 || t == ElemType::kBFloat16;
  };
  // By A, then by (type, K): only weights that can sit side by side.
  std::map<std::pair<std::string, std::pair<int, int64_t>>, MatmulSiblings> groups;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.op_type != "MatMul" || !(n.domain.empty() || n.domain == "ai.onnx") || n.inputs.size() != 2)
      continue;
    const ValueInfo* a = graph.Value(n.inputs[0]);
    const ValueInfo* b = graph.Value(n.inputs[1]);
    if (!a || a->constant || !b || !b->constant || readers[n.inputs[1]] != 1) continue;
    const Tensor& w = *b->constant;
    if (w.shape.size() != 2 || !floating(w.type) || w.shape[0] < 1 || w.shape[1] < 1) continue;
    MatmulSiblings& g = groups[{n.inputs[0], {static_cast<int>(w.type), w.shape[0]}}];
    g.nodes.push_back(i);
    g.weights.push_back(n.inputs[1]);
  }
  std::vector<MatmulSiblings> found;
  for (auto& [key, g] : groups)
    if (g.nodes.size() > 1) found.push_back(std::move(g));
  return found;
}

std::shared_ptr<const Tensor> MergeColumns(const Graph& graph, const MatmulSiblings& group) {
  auto merged = std::make_shared<Tensor>();
  const Tensor& first = *graph.Value(group.weights[0])->constant;
  const int64_t K = first.shape[0];
  const size_t size = ElemSize(first.type);
  int64_t total = 0;
  for (const std::string& w : group.weights) total += graph.Value(w)->constant->shape[1];
  merged->type = first.type;
  merged->shape = {K, total};
  merged->bytes.resize(static_cast<size_t>(K * total) * size);
  int64_t column = 0;
  for (const std::string& name : group.weights) {
    const Tensor& w = *graph.Value(name)->constant;
    const size_t row = static_cast<size_t>(w.shape[1]) * size;
    for (int64_t k = 0; k < K; ++k)
      std::memcpy(merged->bytes.data() + (static_cast<size_t>(k * total + column) * size),
                  w.bytes.data() + static_cast<size_t>(k) * row, row);
    column += w.shape[1];
  }
  return merged;
}

std::shared_ptr<const Tensor> ConcatRows(const std::vector<const Tensor*>& parts) {
  auto merged = std::make_shared<Tensor>();
  merged->type = parts.at(0)->type;
  merged->shape = parts[0]->shape;
  merged->shape.at(0) = 0;
  for (const Tensor* t : parts) {
    merged->bytes.insert(merged->bytes.end(), t->bytes.begin(), t->bytes.end());
    merged->shape[0] += t->shape.at(0);
  }
  return merged;
}

std::vector<mx::array> ColumnParts(const mx::array& product, const mx::Shape& starts, mx::Stream s) {
  const int columns = product.shape(-1);
  if (product.ndim() < 2 || static_cast<int64_t>(product.size()) != columns)
    return mx::split(product, starts, -1, s);
  std::vector<mx::array> parts = mx::split(mx::reshape(product, {columns}, s), starts, 0, s);
  for (mx::array& part : parts) {
    mx::Shape shape = product.shape();
    shape.back() = part.shape(0);
    part = mx::reshape(part, shape, s);  // a reshape of a contiguous view: packed strides, no copy
  }
  return parts;
}

namespace {

/** The group's biases (every member has one) side by side, [N1 + N2 + ...]. */
std::shared_ptr<const Tensor> MergeBiases(const Graph& graph, const MatmulSiblings& group,
                                          const std::unordered_map<size_t, MatmulBias>& biases) {
  std::vector<const Tensor*> parts;
  for (size_t node : group.nodes) parts.push_back(graph.Value(biases.at(node).bias)->constant.get());
  return ConcatRows(parts);
}

}  // namespace

std::unordered_map<size_t, MergedColumns> AddMergedWeights(Plan& plan, const Graph& graph,
                                                           const std::unordered_set<std::string>& gemv_weights,
                                                           const std::unordered_map<size_t, MatmulBias>& biases) {
  std::unordered_map<size_t, MergedColumns> by_node;
  if (!MergeMatmulsEnabled()) return by_node;
  for (const MatmulSiblings& group : FindMatmulSiblings(graph, plan.output_names)) {
    const std::string name = "\x01merged:" + group.weights[0];  // no ONNX value's name
    const std::shared_ptr<const Tensor> weights = MergeColumns(graph, group);
    const bool transposed = std::all_of(group.weights.begin(), group.weights.end(),
                                        [&](const std::string& w) { return gemv_weights.count(w) > 0; });
    plan.constants.emplace(name, transposed ? GemvLayout(*weights) : ShareArray(weights));
    if (transposed) plan.transposed_constants.insert(name);
    // The biases side by side where each is [width] (a bias of another length fails the trace).
    std::string bias;
    if (std::all_of(group.nodes.begin(), group.nodes.end(), [&](size_t node) {
          auto b = biases.find(node);
          return b != biases.end() && graph.Value(b->second.bias)->constant->shape[0] ==
                                          graph.Value(graph.nodes[node].inputs[1])->constant->shape[1];
        })) {
      bias = "\x01merged bias:" + group.weights[0];
      plan.constants.emplace(bias, ShareArray(MergeBiases(graph, group, biases)));
    }
    int64_t column = 0;
    for (size_t j = 0; j < group.nodes.size(); ++j) {
      const int64_t width = graph.Value(group.weights[j])->constant->shape[1];
      const MergedColumns m{name, column, width, bias};
      by_node[group.nodes[j]] = m;
      plan.merged_members[group.weights[j]] = m;
      column += width;
    }
  }
  return by_node;
}

}  // namespace mlx_ep
