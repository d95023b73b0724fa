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

#include <string>
#include <utility>
#include <vector>

#include "mlx/fast.h"
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

/** What a GroupQueryAttention decode step (one query row, past buffers of the shared layout)
 *  reads, as the node has it (attention_contrib_gqa.cc): query [B, 1, H * D], or packed QKV
 *  [B, 1, (H + 2 Hkv) * D] when key/value are absent; past_key/past_value [B, Hkv, P, D];
 *  seqlens_k [B] and total_sequence_length (int32); the cos/sin caches [max_position, rot / 2] and
 *  position_ids [B, n] (int64) when given; window 0 for none. */
struct GqaDecodeStepInputs {
  const mx::array& query;
  std::optional<mx::array> key, value;
  const mx::array& past_key;
  const mx::array& past_value;
  const mx::array& seqlens_k;
  const mx::array& total_length;
  std::optional<mx::array> cos_cache, sin_cache, position_ids;
  int heads, kv_heads, head_size;
  bool interleaved;
  int window;
  float scale;
};

/** A decode step's results: the output [B, 1, H * D], the rotated key rows and the value rows
 *  [B, Hkv, 1, D] (the in-place update's rows), all in the query's dtype. */
struct GqaDecodeStep {
  mx::array out, key, value;
};

/** ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel on the fused GPU paths: a decode step in one custom
 *  CUDA kernel (DecodeStepByKernel). Off by default until it is measured on a GPU. */
bool DecodeStepByKernelWanted();

/** The whole decode step (rotation, masks, attention, the new rows) in one custom CUDA kernel
 *  over the node's inputs where they are (attention_gqa_cuda.cc); nullopt off MLX's CUDA backend
 *  and for shapes it does not take (head size over 128, more than 8191 past rows). No softcap,
 *  attention_bias or head_sink: the caller declines those. */
std::optional<GqaDecodeStep> DecodeStepByKernel(const GqaDecodeStepInputs& in, mx::Stream s);

/** What DecodeStepByKernel hands MLX's cuda_kernel: the kernel's inputs (absent ones replaced by
 *  another), its three outputs' shapes (all of `dtype`), the threads of its grid (128 a block)
 *  and the constants its body names. */
struct DecodeStepLaunch {
  std::vector<mx::array> inputs;
  std::vector<mx::Shape> output_shapes;
  mx::Dtype dtype;
  int threads;
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> constants;
};

/** DecodeStepByKernel's launch on any device (a test's view of it): nullopt for what the kernel
 *  does not take. */
std::optional<DecodeStepLaunch> PlanDecodeStep(const GqaDecodeStepInputs& in);

/** That kernel's device code as NVRTC compiles it (header, then its body), for host tests. */
const char* GqaDecodeKernelSourceForTests();

/** GroupQueryAttention's attention core [B, H, S, D] (query's dtype) through
 *  mx::fast::scaled_dot_product_attention where that is fused and exact for the node (see
 *  attention_gqa_fused.cc); nullopt where the composed core must run. */
std::optional<mx::array> AttendGqaFused(const OpContext& c, const GqaCoreInputs& in);

}  // namespace mlx_ep
