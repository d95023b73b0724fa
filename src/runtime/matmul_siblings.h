// MatMuls that multiply one value by different constant weights (BERT's query, key and value
// projections, a Llama MLP's gate and up) as one product over the weights side by side.
//
// On a GPU each product is a cuBLASLt call, which MLX's CUDA backend pays ~18 µs of host time for
// (bench/mlx_primitive_cost.py; ~6 µs for its own gemv), whatever its size; on a CPU one BLAS
// call over the merged weight reads the input once. The trace computes A x [B1 | B2 | ...] once
// and each MatMul's output is its block of columns (a view). Each column is the same dot product
// as before, in the same dtype.
//
// ONNXRUNTIME_EP_MLX_MERGE_MATMULS=0 keeps one product per MatMul (A/B).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/graph.h"
#include "runtime/matmul_bias.h"
#include "runtime/plan.h"

namespace mlx_ep {

/** MatMuls of one group: node indices into Graph::nodes and their weights, in graph order. */
struct MatmulSiblings {
  std::vector<size_t> nodes;
  std::vector<std::string> weights;
};

/** True unless ONNXRUNTIME_EP_MLX_MERGE_MATMULS=0. */
bool MergeMatmulsEnabled();

/** The groups of two or more ai.onnx MatMuls of `graph` on the same input A (not a constant)
 *  whose B are 2-D constants of one floating type and K that no other node reads (nor is one of
 *  `outputs`). */
std::vector<MatmulSiblings> FindMatmulSiblings(const Graph& graph, const std::vector<std::string>& outputs);

/** `parts` (one type, equal dims past the first) one after another along their first axis. */
std::shared_ptr<const Tensor> ConcatRows(const std::vector<const Tensor*>& parts);

/** The group's weights side by side, [K, N1 + N2 + ...]. */
std::shared_ptr<const Tensor> MergeColumns(const Graph& graph, const MatmulSiblings& group);

/** The merged product's columns split at `starts` (ascending, past 0) along its last axis: views.
 *  Where the product is one row (its leading dimensions all 1: a decode step at batch 1) the views
 *  come from a flat view of it, so that their strides are packed: a column view of [1, 1, 2I]
 *  keeps the row's stride 2I on its unit axes, which MLX's contiguous kernels (the SiLU product
 *  of gate and up) pass on to their outputs, and which MLX's matmul then copies (its operand
 *  check wants a row's stride equal to its length: a TinyLlama decode step's 22 `copy_g_nd` on a
 *  GPU, docs/performance.md, thirty-first session). */
std::vector<mx::array> ColumnParts(const mx::array& product, const mx::Shape& starts, mx::Stream s);

/** Adds the merged weights of `graph`'s groups to `plan` as constants (in the gemv layout where
 *  all of a group's weights are in `gemv_weights`) and its members to Plan::merged_members, and,
 *  where every member has a bias in `biases` (by node index, runtime/matmul_bias.h), the biases
 *  side by side; returns, by node index, the columns each MatMul reads. Nothing unless
 *  MergeMatmulsEnabled. */
std::unordered_map<size_t, MergedColumns> AddMergedWeights(Plan& plan, const Graph& graph,
                                                           const std::unordered_set<std::string>& gemv_weights,
                                                           const std::unordered_map<size_t, MatmulBias>& biases);

}  // namespace mlx_ep
