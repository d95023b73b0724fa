// A GroupQueryAttention prompt's rotary embedding as one custom CUDA kernel
// (attention_gqa_prefill_cuda.cc; the default; ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=0 composes it).
//
// Why: on an H100 (twenty-eighth session) a TinyLlama prefill of 512 tokens spent 1,067 us in
// the 44 rotations of Q and K (MLX's fused elementwise kernel over strided views of the packed
// QKV product, ~24 us for 2 MB each) and, for cuDNN's attention, copies of V out of that product.
// This kernel reads the packed (or separate) rows where they are and writes Q, K and V in the
// [B, heads, S, D] layout the attention reads, Q and K rotated at each row's position (MLX ops
// compute the positions: attention_contrib_gqa.cc's Rotate, the same clipping).
#pragma once

#include <optional>
#include <string>

#include "ops/cuda_rows.h"
#include "ops/op.h"

namespace mlx_ep {

/** What the kernel reads: query [B, S, H * D], or packed QKV [B, S, (H + 2 Hkv) * D] when key and
 *  value are absent; positions [B, S] int32 (already clipped to the caches' rows); the cos/sin
 *  caches [max_position, rot / 2] of the query's dtype. */
struct GqaPrefillRotateInputs {
  const mx::array& query;
  std::optional<mx::array> key, value;
  const mx::array& positions;
  const mx::array& cos_cache;
  const mx::array& sin_cache;
  int heads, kv_heads, head_size;
  bool interleaved;
};

/** Q [B, H, S, D], K and V [B, Hkv, S, D], Q and K rotated, in the query's dtype. */
struct GqaRotatedQkv {
  mx::array q, k, v;
};

/** ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=1 on the fused GPU paths. */
bool PrefillRotateKernelWanted();

/** The kernel's launch on any device (a test's view of it): nullopt for what it does not take. */
std::optional<KernelLaunch> PlanPrefillRotate(const GqaPrefillRotateInputs& in);

/** The rotated Q, K and V from one kernel; nullopt off MLX's CUDA backend or where
 *  PlanPrefillRotate declines. */
std::optional<GqaRotatedQkv> PrefillRotateByKernel(const GqaPrefillRotateInputs& in, mx::Stream s);

/** The kernel's device code as NVRTC compiles it (header, "// kernel body:", body). */
std::string GqaPrefillRotateSourceForTests();

// The fused attention core's output to the layout its caller merges, in one custom CUDA kernel
// (the default; ONNXRUNTIME_EP_MLX_HEADS_LAST_KERNEL=0 keeps MLX's select): y [B, H, S, D] (cuDNN's, in q's row-major
// layout) written as [B, S, H, D] in the query's dtype, the rows that attend no key zero (as in
// ORT). Why: MLX's select over the transposed view took 22 x 22.8 us of a 512-token TinyLlama
// prefill on an H100 (2 MB a layer at ~0.18 TB/s; thirty-first session), its strided kernel
// computing every index of a 4-D view.

/** On the fused GPU paths, unless ONNXRUNTIME_EP_MLX_HEADS_LAST_KERNEL=0. */
bool HeadsLastKernelWanted();

/** The launch (a test's view): y [B, H, S, D] of a float type, keep [B, S] bool, the output type
 *  `t`; nullopt for what the kernel does not take. */
std::optional<KernelLaunch> PlanHeadsLast(const mx::array& y, const mx::array& keep, mx::Dtype t);

/** y as [B, S, H, D] of type `t`, rows whose keep[b, s] is false zero; nullopt off MLX's CUDA
 *  backend or where PlanHeadsLast declines. */
std::optional<mx::array> HeadsLastByKernel(const mx::array& y, const mx::array& keep, mx::Dtype t,
                                           mx::Stream s);

/** That kernel's body as NVRTC compiles it (it has no header). */
std::string GqaHeadsLastSourceForTests();

}  // namespace mlx_ep
