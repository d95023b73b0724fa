// Softmax and LogSoftmax over a row as one custom CUDA kernel of the EP's (softmax_cuda.cc), where
// the composed translation (normalization.cc) is five or six MLX kernels a node: the max, the
// shifted exp with its casts, the widening of e for the sum, the sum and the division; and before
// it the kernel of attention's scaling and mask, which the kernel reads in its own pass. A float16
// BERT-base layer's softmax with its scores was ~6 of its ~25 launches, each ~15 us of MLX's host
// encoding on a run where the GPU idles (issue 7's kernel timeline). The default since the
// thirty-second session (BERT-base fp16 3.54 against 4.41 ms on an H100);
// ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=0 keeps the composed form.
#pragma once

#include <optional>
#include <vector>

#include "ops/cuda_rows.h"
#include "ops/op.h"
#include "ops/softmax_scores.h"

namespace mlx_ep {

/** A (Log)Softmax over the last axis of x [..., n], as normalization.cc composes it (with
 *  attention's scaling and mask read in the kernel's pass where x is made of them,
 *  softmax_scores.h):
 *  - `float16_body` (float16 Softmax-13+, x float16, not `log`): ONNX's function body, each step
 *    rounded to float16: x - max, exp of it, the float32 sum of those, then e / sum;
 *  - otherwise (float32, bfloat16, float16 LogSoftmax or Softmax before opset 13): the steps in
 *    float32 on the widened row, y = e / sum (or (x - max) - log(sum)), rounded once to x's type. */
struct RowSoftmaxInputs {
  const mx::array& x;
  bool log;
  bool float16_body;
};

/** The launch on any device (a test's view of it; `s` the stream of a rank-0 mask's reshape to
 *  [1]; `terms`, where given, gets the scores' terms the kernel reads): nullopt for what the kernel does not
 * take (float64 and integer rows, rows over kMaxKernelRow values or of more than 10 dims, empty x, a float16
 * body of another type or of a LogSoftmax). */
std::optional<KernelLaunch> PlanRowSoftmax(const RowSoftmaxInputs& in, mx::StreamOrDevice s = {},
                                           ScoreTerms* terms = nullptr);

/** True where RowSoftmaxByKernel runs: MLX's CUDA backend on `s` with the fused GPU paths on
 *  (fused_gpu_internal.h), unless ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=0. */
bool RowSoftmaxKernelWanted(mx::Stream s);

/** y (x's shape and type); nullopt off MLX's CUDA backend or where PlanRowSoftmax declines. */
std::optional<mx::array> RowSoftmaxByKernel(const RowSoftmaxInputs& in, mx::Stream s);

/** What RowSoftmaxByKernel launched for `y` (its output), while y's primitive lives: the kernel's
 *  inputs (x or the scores, the scaling's value, the mask; placeholders where `terms` says they
 *  are absent), the scores' terms and the body. nullopt for any other array, and unless
 *  ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 (attention_heads_cuda.h, its one reader). */
struct RowSoftmaxLaunch {
  std::vector<mx::array> inputs;
  ScoreTerms terms;
  bool log = false;
  bool float16_body = false;
};
std::optional<RowSoftmaxLaunch> RowSoftmaxLaunchOf(const mx::array& y);

/** The kernel's device code as NVRTC compiles it (header, then "// kernel body:" and the body). */
const char* RowSoftmaxKernelSourceForTests();

}  // namespace mlx_ep
