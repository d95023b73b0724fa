// MatMulNBits nodes that multiply one value by different quantized weights (a Llama MLP's gate and
// up in onnxruntime-genai's int4 layout) as one MatMulNBits over the weights side by side.
//
// Why: each MatMulNBits is a primitive a run (on a GPU the EP's decode kernel, ~7 us of MLX's host
// encoding and a launch); a TinyLlama int4 decode step has 111 of them where its fp16 twin, whose
// gate and up MatMuls merge (matmul_siblings.h), has 89. B's rows, the scales' and the zero
// points' are per output column, so the group's node is the same computation of every column:
// its B, scales and zero points are the members' concatenated along N, and each member's output
// is its block of the group's columns (a view). The members' constants are views of the merged
// ones (Plan::merged_rows), not second copies.
//
// ONNXRUNTIME_EP_MLX_MERGE_MATMULS=0 keeps one node per MatMulNBits (A/B), as for MatMuls.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "runtime/plan.h"

namespace mlx_ep {

/** com.microsoft MatMulNBits nodes of one group: indices into Graph::nodes, in graph order. */
struct NBitsSiblings {
  std::vector<size_t> nodes;
};

/** The groups of two or more MatMulNBits of `graph` on the same input A (not a constant) with
 *  the same K, bits, block_size and accuracy_level, B, scales and (in all or none) zero points
 *  constants of one type and layout that no other node reads (nor is one of `outputs`), and no
 *  g_idx, bias or prepacked weight. */
std::vector<NBitsSiblings> FindNBitsSiblings(const Graph& graph, const std::vector<std::string>& outputs);

/** One of the group's inputs (1: B, 2: scales, 3: zero points) of every member concatenated along
 *  their first axis (N, or N x k_blocks where flat): a row-major concatenation of their bytes. */
std::shared_ptr<const Tensor> MergeRows(const Graph& graph, const NBitsSiblings& group, size_t input);

/** Adds the merged constants of `graph`'s groups to `plan`, each member's as a view of them
 *  (Plan::merged_rows); returns, by node index, what each member reads. Nothing unless
 *  MergeMatmulsEnabled (matmul_siblings.h) and on the fused GPU paths (a GPU, or their test mode on
 *  MLX's CPU device: the CPU kernels gain nothing from it). */
std::unordered_map<size_t, MergedNBits> AddMergedNBits(Plan& plan, const Graph& graph);

}  // namespace mlx_ep
