// MatMulNBits on one input as one node (nbits_siblings.h).
#include "runtime/nbits_siblings.h"

#include <map>
#include <string>
#include <tuple>
#include <unordered_map>

#include "ops/fused_gpu_internal.h"
#include "runtime/matmul_siblings.h"

namespace mlx_ep {
namespace {

/** Input `i` of `n` when present (a name, not empty). */
const std::string* InputOf(const Node& n, size_t i) {
  return i < n.inputs.size() && !n.inputs[i].empty() ? &n.inputs[i] : nullptr;
}

/** A constant input's (type, rank), or (-1, -1) for an absent one; nullopt for a present input
 *  that is no constant or that another node reads too. */
std::optional<std::pair<int, int>> ConstantKey(const Graph& graph, const Node& n, size_t i,
                                               std::unordered_map<std::string, int>& readers) {
  const std::string* name = InputOf(n, i);
  if (!name) return std::pair{-1, -1};
  const ValueInfo* v = graph.Value(*name);
  // Rows are merged along the first axis: a scalar has none (the claim takes none anyway).
  if (!v || !v->constant || v->constant->shape.empty() || readers[*name] != 1) return std::nullopt;
  return std::pair{static_cast<int>(v->constant->type), static_cast<int>(v->constant->shape.size())};
}

}  // namespace

std::vector<NBitsSiblings> FindNBitsSiblings(const Graph& graph, const std::vector<std::string>& outputs) {
  std::unordered_map<std::string, int> readers = graph.ReaderCounts(outputs);
  // By A, then by everything the group's node shares: attributes, and each constant's type and rank.
  using Key = std::tuple<std::string, std::vector<int64_t>, std::vector<std::pair<int, int>>>;
  std::map<Key, NBitsSiblings> groups;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.op_type != "MatMulNBits" || n.domain != "com.microsoft" || n.outputs.size() != 1 ||
        n.inputs.size() < 3)
      continue;
    if (InputOf(n, 4) || InputOf(n, 5) || n.AttrInt("weight_prepacked", 0) != 0) continue;
    const ValueInfo* a = graph.Value(n.inputs[0]);
    if (!a || a->constant) continue;
    std::vector<std::pair<int, int>> constants;
    bool ok = true;
    for (size_t k = 1; k <= 3 && ok; ++k) {
      const auto key = ConstantKey(graph, n, k, readers);
      ok = key && (k == 3 || key->first >= 0);  // B and scales present
      if (ok) constants.push_back(*key);
    }
    if (!ok) continue;
    const int64_t N = n.AttrInt("N", 0), K = n.AttrInt("K", 0);
    const Tensor& b = *graph.Value(n.inputs[1])->constant;
    if (N <= 0 || K <= 0 || b.shape.size() != 3 || b.shape[0] != N) continue;
    const std::vector<int64_t> attributes = {K, n.AttrInt("bits", 4), n.AttrInt("block_size", 0),
                                             n.AttrInt("accuracy_level", 0)};
    groups[{n.inputs[0], attributes, constants}].nodes.push_back(i);
  }
  std::vector<NBitsSiblings> found;
  for (auto& [key, g] : groups)
    if (g.nodes.size() > 1) found.push_back(std::move(g));
  return found;
}

std::shared_ptr<const Tensor> MergeRows(const Graph& graph, const NBitsSiblings& group, size_t input) {
  std::vector<const Tensor*> parts;
  for (size_t node : group.nodes)
    parts.push_back(graph.Value(graph.nodes[node].inputs[input])->constant.get());
  return ConcatRows(parts);
}

std::unordered_map<size_t, MergedNBits> AddMergedNBits(Plan& plan, const Graph& graph) {
  std::unordered_map<size_t, MergedNBits> by_node;
  // The GPU paths' (and their test mode on MLX's CPU device, ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS):
  // on the CPU a member's MatMulNBits primitive costs no more than the Split the merge adds, and an
  // A/B showed no gain there (bench/bench_llm.py, a Qwen2-shaped int4 decoder of 8 layers, a
  // decode step on 2 cores: merged 26.3-27.2 ms in 5 runs, apart 18.8-31.5 in 5, the machine
  // switching between two speeds), so the CPU keeps one node a member, as before.
  if (!MergeMatmulsEnabled() || !UseFusedGpuPaths()) return by_node;
  for (const NBitsSiblings& group : FindNBitsSiblings(graph, plan.output_names)) {
    const Node& first = graph.nodes[group.nodes[0]];
    const bool has_zero_points = InputOf(first, 3) != nullptr;
    // Each input's merged constant, named after the first member's (no ONNX value's name), and
    // each member's rows of it.
    std::string names[4];
    for (size_t k = 1; k <= (has_zero_points ? 3u : 2u); ++k) {
      names[k] = "\x01merged nbits:" + first.inputs[k];
      plan.constants.emplace(names[k], ShareArray(MergeRows(graph, group, k)));
      int64_t row = 0;
      for (size_t node : group.nodes) {
        const std::string& own = graph.nodes[node].inputs[k];
        const int64_t rows = graph.Value(own)->constant->shape.at(0);
        plan.merged_rows[own] = MergedRows{names[k], row, row + rows};
        row += rows;
      }
    }
    int64_t total = 0;
    for (size_t node : group.nodes) total += graph.nodes[node].AttrInt("N", 0);
    int64_t column = 0;
    for (size_t node : group.nodes) {
      const int64_t width = graph.nodes[node].AttrInt("N", 0);
      by_node[node] = MergedNBits{names[1], names[2], names[3], column, width, total};
      column += width;
    }
  }
  return by_node;
}

}  // namespace mlx_ep
