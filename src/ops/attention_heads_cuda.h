// Attention over heads as exported models spell it, P = Softmax((Q @ K^T) scaled + mask), then
// P @ V, as one custom CUDA kernel of the EP's (attention_heads_cuda.cc; opt-in,
// ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1). Taken at the P @ V MatMul when P is the EP's softmax
// kernel over scores that are an MLX Matmul (softmax_cuda.h reads the scaling and the mask in its
// pass): the kernel reads Q, K^T and V through their strides (head views of a merged QKV
// product), so MLX's two batched products, the copies MLX's matmul makes of operands whose rows
// are not packed (`check_transpose`, three a BERT layer) and the softmax kernel become one launch.
//
// Why: a BERT-base fp16 8 x 128 run is host-bound on the GPU (375 MLX primitives, eval 2.8-3.7 ms
// of a 3.5-4.5 ms run on an H100, thirty-second session); each cuBLASLt product costs ~18 us of
// MLX's host time (thirteenth session) and a layer has two here, with 48 copy kernels a run
// (twenty-eighth session's timeline).
//
// Numerics as the composed ops round them: each score the float32 dot of Q's and K's rows rounded
// to T (MLX's matmul), then the softmax kernel's steps (scaled and masked in T, the softmax in
// float32 or ONNX's float16 body), P rounded to T, P @ V in float32 rounded once to T.
#pragma once

#include <optional>

#include "ops/cuda_rows.h"
#include "ops/op.h"
#include "ops/softmax_cuda.h"
#include "ops/softmax_scores.h"

namespace mlx_ep {

/** The most keys the CUDA-core kernel takes (each warp keeps its row's scores in shared memory). */
constexpr int kHeadsAttentionMaxKeys = 1024;

/** What the kernel reads: Q [..., S, D], K^T [..., D, S'], V [..., S', D] of one float type with
 *  the same leading dims (any strides), the scaling's one value and the mask (as the softmax
 *  kernel takes them: placeholders where `terms` says they are absent), and the softmax's body. */
struct HeadsAttentionInputs {
  mx::array q, kt, v, factor, mask;
  ScoreTerms terms;
  bool float16_body = false;
};

/** The two kernels: a warp a query row on CUDA cores (float32, float16, bfloat16; at most
 *  kHeadsAttentionMaxKeys keys), or a warp 16 query rows on tensor cores (float16 and bfloat16,
 *  compute capability 8.0 and later; attention_heads_mma_cuda.cc), the default where it applies. */
enum class HeadsKernel { kRows, kTensorCores };

/** The launch of `kernel` on any device (a test's view): out [..., S, D] of Q's type; nullopt for
 *  what the kernel does not take (other types, mismatched dims, D over 128, more than 8 dims; for
 *  kRows over kHeadsAttentionMaxKeys keys; for kTensorCores float32). */
std::optional<KernelLaunch> PlanHeadsAttention(const HeadsAttentionInputs& in, HeadsKernel kernel,
                                               mx::StreamOrDevice s = {});

/** The kernel's inputs for P @ V when `softmax` (RowSoftmaxLaunchOf(p)) is a Softmax (not a
 *  LogSoftmax) over an MLX Matmul's scores of P's shape: Q and K^T are that Matmul's operands;
 *  else nullopt. */
std::optional<HeadsAttentionInputs> HeadsAttentionInputsOf(const RowSoftmaxLaunch& softmax,
                                                           const mx::array& p, const mx::array& v);

/** P @ V by a kernel: ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=1 (or "rows": the CUDA-core kernel
 *  only), MLX's CUDA backend on `s`, P the softmax kernel's output (not a LogSoftmax) over an MLX
 *  Matmul's scores, and PlanHeadsAttention's shapes; tensor cores where they take it; else nullopt. */
std::optional<mx::array> HeadsAttentionByKernel(const mx::array& p, const mx::array& v, mx::Stream s);

/** A kernel's device code as NVRTC compiles it (header, then "// kernel body:" and the body). */
const char* HeadsAttentionSourceForTests(HeadsKernel kernel);

}  // namespace mlx_ep
