// The GPU-only translations that use MLX's fused kernels (mx::fast::layer_norm / rms_norm /
// scaled_dot_product_attention) where the composed forms cost many more CUDA kernels, and the
// switch that picks them.
//
// ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS:
//  - unset or "1": on when MLX runs on a GPU (RuntimeDevice() != cpu), never on MLX's CPU device
//    (whose fast:: kernels fall back to one-chain float32 reductions, not accurate enough);
//  - "0": off everywhere (A/B against the composed paths on a GPU);
//  - "force": on on the CPU too, the same graphs as on a GPU (tests of the translation; MLX's CPU
//    fallbacks of the fused kernels are less accurate than its CUDA kernels, see the callers);
//  - "force32": as "force", but attention is fed float32 on the CPU so that MLX's (float16)
//    fallback does not hide the masks' exactness behind its rounding (tests only).
#pragma once

#include "ops/op.h"

namespace mlx_ep {

constexpr const char* kFusedGpuPathsEnv = "ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS";

/** True when the fused GPU paths are taken (see the top). */
bool UseFusedGpuPaths();

/** True when forced onto MLX's CPU device (ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=force or force32)
 *  while RuntimeDevice() is the CPU. */
bool FusedGpuPathsOnCpu();

/** True for "force32" (see the top). */
bool FusedGpuPathsFloat32();

/** mx::fast::layer_norm over the last axis of float32 `x` [rows, n] (w [n], b [n]). With
 *  `recenter` (the node's input is float32, tolerance 1e-5) the rows are first shifted by their
 *  float32 mean: normalization does not change under a shift, but the kernel's own mean carries
 *  ~log2(n) ulps of the row's magnitude, and on rows whose mean is large against their spread
 *  (mean 100, std 1, n 768) that put outputs up to 1.2e-5 from ORT's on the H200. The residuals
 *  are exact (Sterbenz) and their mean is small, so the kernel's mean of them is accurate. Two
 *  more primitives a norm (the Sum; the division by n and the shift, compiled into one kernel);
 *  float16 and bfloat16 inputs do not need it (their tolerance is 100x wider). */
mx::array FastLayerNorm(const mx::array& x, const mx::array& w, const std::optional<mx::array>& b,
                        float eps, bool recenter, mx::Stream s);

/** arange(n) as int32, one array per n for the process. MLX's compile merges equal operations
 *  only when their inputs are the same arrays (compile_simplify's CSE walks the users of each
 *  input), and mx::arange has no inputs: each call is a kernel of its own, and so is everything
 *  computed from it (positions, masks, rotary rows: ~14 kernels per GroupQueryAttention layer).
 *  One constant array per length makes the layers' step computations identical, so the compiled
 *  graph computes them once per trace. */
mx::array SharedArange(int n);

/** arange(n) int32 for the step computations of attention ops: SharedArange where the fused GPU
 *  paths are on, else mx::arange as before (the CPU paths keep their graphs). */
mx::array StepArange(int n, mx::Stream s);

/** What GroupQueryAttention's fused core reads (attention_contrib_gqa.cc computes it): query
 *  [B, H, S, D] (rotated), the step's new key/value rows [B, Hkv, S, D] and the past buffers
 *  [B, Hkv, P, D] as read (PastRows: zero-padded to present's length `len` in the non-shared
 *  layout), all of the query's dtype; the step facts [B, 1, 1, 1] int32 (total = seqlens_k + 1,
 *  offset = where the new rows go). */
struct GqaCoreInputs {
  const mx::array& q;
  const mx::array& k;
  const mx::array& v;
  const std::optional<mx::array>& past_k;
  const std::optional<mx::array>& past_v;
  const mx::array& total;
  const mx::array& offset;
  int len;
  /** For a decode step (S = 1): the query's row twice, [B, H, 2, D], when the rotation wrote it
   *  so (no copy kernel then); else the core duplicates the row itself. */
  const std::optional<mx::array>& q_doubled;
};

/** GroupQueryAttention's attention core [B, H, S, D] (query's dtype) through
 *  mx::fast::scaled_dot_product_attention where that is fused and exact for the node (see
 *  attention_gqa_fused.cc); nullopt where the composed core must run. */
std::optional<mx::array> AttendGqaFused(const OpContext& c, const GqaCoreInputs& in);

}  // namespace mlx_ep
