// GroupQueryAttention's whole decode step (one query row, the shared-buffer layout) as one
// primitive: the packed or separate QKV read in place, the rotation, the masks from seqlens_k and
// total_sequence_length, attention over the past buffer and the new row, the output in its
// [B, 1, H * D] layout and the rotated K / V rows for the in-place update. On MLX's CUDA backend a
// custom kernel (attention_gqa_cuda.cc, ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel), on its CPU
// device a primitive of the EP's CPU kernels (attention_gqa_step_cpu.cc). The semantics are
// attention_contrib_gqa.cc's for one query row.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlx/fast.h"
#include "ops/cuda_rows.h"
#include "ops/op.h"

namespace mlx_ep {

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

/** On the fused GPU paths, a decode step in one custom CUDA kernel (DecodeStepByKernel): the
 *  default, unless ONNXRUNTIME_EP_MLX_DECODE_ATTENTION names another path ("sdpa", "gemv"). */
bool DecodeStepByKernelWanted();

/** The whole decode step (rotation, masks, attention, the new rows) in one custom CUDA kernel
 *  over the node's inputs where they are (attention_gqa_cuda.cc); nullopt off MLX's CUDA backend
 *  and for shapes it does not take (head size over 128, more than 8191 past rows). No softcap,
 *  attention_bias or head_sink: the caller declines those. */
std::optional<GqaDecodeStep> DecodeStepByKernel(const GqaDecodeStepInputs& in, mx::Stream s);

/** DecodeStepByKernel's launch on any device (a test's view of it): the kernel's inputs (absent
 *  ones replaced by another), its three outputs (the query's dtype), the threads of its grid and of
 *  a block (512, or ONNXRUNTIME_EP_MLX_DECODE_THREADS; fewer where its shared memory would not fit)
 *  and the constants its body names; split into blocks of past rows, one more input (the heads'
 *  counters) and output (the splits' partial results, float32) and the constant SPLITS. nullopt
 *  for what the kernel does not take. `split_rows` > 0: past rows per block
 * (ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS). `grouped`: the grouped kernel's launch instead
 *  (ONNXRUNTIME_EP_MLX_DECODE_GROUPED=1: a block per batch entry, KV head and split of the
 *  admitted rows; PlanGroupedDecodeStep), nullopt where its shared memory would not fit. */
std::optional<KernelLaunch> PlanDecodeStep(const GqaDecodeStepInputs& in, int split_rows = 0,
                                           bool grouped = false);

/** That kernel's device code as NVRTC compiles it (header, then its body; `split`: the body of
 *  the kernel in blocks of past rows), for host tests. */
std::string GqaDecodeKernelSourceForTests(bool split = false);

/** The grouped kernel's device code (`grouped` above; attention_gqa_grouped_cuda.cc), likewise. */
std::string GqaGroupedKernelSourceForTests();

/** The step on MLX's CPU device (attention_gqa_step_cpu.cc), for what PlanDecodeStep takes;
 *  the attention loops are GroupQueryAttention's CPU kernel's (`portable`: their portable form). */
std::optional<GqaDecodeStep> DecodeStepOnCpu(const GqaDecodeStepInputs& in, bool portable, mx::Stream s);

}  // namespace mlx_ep
