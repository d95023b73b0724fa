// Row normalizations (LayerNormalization, RMSNormalization and ORT's contrib forms, with or
// without the skip sum) as one custom CUDA kernel of the EP's (normalization_cuda.cc), where
// MLX's fused kernels need a cast before and after (mx::fast::layer_norm / rms_norm on float32
// values) and the skip sum is a kernel of its own: three kernels a norm of a float16 decode step
// (~90 of a TinyLlama step's 352 launches, each ~15 us of MLX's host encoding) become one.
// Opt-in (ONNXRUNTIME_EP_MLX_NORM_KERNEL=1) until a GPU has run it: a kernel of the same plan was
// measured slower in the twelfth session (its flags in a params array, a dummy sum output) and
// reverted (caafe65); this one takes template constants and writes only the outputs used.
#pragma once

#include <optional>
#include <vector>

#include "ops/cuda_rows.h"
#include "ops/op.h"

namespace mlx_ep {

/** One row normalization over the last axis of x [..., n]: s = x (+ skip) (+ bias) in float32,
 *  then simplified: y = s / sqrt(mean(s^2) + eps) * scale; else y = (s - mean) / sqrt(var + eps)
 *  * scale (+ beta), every operation in float32 in ORT's order, y rounded once to `y_dtype`.
 *  x float16, bfloat16 or float32; skip x's shape and type; scale, bias, beta [n] of any float
 *  type but float64. With `want_sum` the kernel also writes s rounded to x's type (ORT's
 *  input_skip_bias_sum). */
struct RowNormInputs {
  const mx::array& x;
  const std::optional<mx::array>& skip;
  const std::optional<mx::array>& bias;
  const mx::array& scale;
  const std::optional<mx::array>& beta;
  float eps;
  bool simplified;
  mx::Dtype y_dtype;
  bool want_sum;
  /** x + skip rounded to x's type before the bias and the norm: an Add node's output, as the
   *  composed Add + LayerNormalization reads it (ORT's SkipLayerNormalization keeps it float32). */
  bool round_sum = false;
};

/** The launch on any device (a test's view of it): nullopt for what the kernel does not take
 *  (other dtypes, rows over 16384 values, a skip of another shape, empty x). */
std::optional<KernelLaunch> PlanRowNorm(const RowNormInputs& in);

/** True where RowNormByKernel runs: MLX's CUDA backend on `s` with the fused GPU paths on
 *  (fused_gpu_internal.h) and ONNXRUNTIME_EP_MLX_NORM_KERNEL=1. Opt-in for now: no GPU has run
 *  the kernel yet (no machine was lent after it was written); without it, MLX's fused kernels on
 *  float32 values as before. */
bool RowNormKernelWanted(mx::Stream s);

/** y (x's shape, `y_dtype`), then s (x's type) when `want_sum`; nullopt off MLX's CUDA backend
 *  or where PlanRowNorm declines. */
std::optional<std::vector<mx::array>> RowNormByKernel(const RowNormInputs& in, mx::Stream s);

/** The kernel's device code as NVRTC compiles it (header, then "// kernel body:" and the body
 *  of the kernel without the sum output; RowNormSumBodyForTests: the body with it). */
const char* RowNormKernelSourceForTests();
const char* RowNormSumBodyForTests();

}  // namespace mlx_ep
