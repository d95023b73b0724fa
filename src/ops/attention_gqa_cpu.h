// GroupQueryAttention's attention core on MLX's CPU device: one custom MLX primitive
// (attention_gqa_cpu.cc) that reads seqlens_k / total_sequence_length when it runs and loops over
// the keys each query row attends only, instead of scoring every row of a max_length buffer and
// masking. Used by attention_contrib_gqa.cc, whose header defines the semantics.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/op.h"

namespace mlx_ep {
namespace gqa_cpu {

/** The arrays the core reads, in T (float32, float16 or bfloat16) unless said otherwise. */
struct Inputs {
  mx::array q;                         ///< [B, H, S, D], rotated
  mx::array k, v;                      ///< [B, Hkv, S, D]: the step's new rows, rotated
  std::optional<mx::array> past_k;     ///< [B, Hkv, L, D]: past as attention reads it (rows j < offset_b)
  std::optional<mx::array> past_v;     ///< likewise
  mx::array seqlens_k;                 ///< [B] int32 data
  mx::array total;                     ///< total_sequence_length, one int32 (data)
  std::optional<mx::array> bias;       ///< attention_bias [B|1, H|1, S, <= L]
  std::optional<mx::array> head_sink;  ///< [H]
};

/** Where query row s (of S) of a batch entry finds its keys: past rows [past_lo, past_lo + n_past)
 *  and new rows [new_lo, new_lo + n_new) (at offset + s'), or none at all (`any` false: the output
 *  is 0). attention_contrib_gqa.cc's masks from the entry's seqlens_k and total_sequence_length,
 *  `past` rows of past buffer, present's length, the window (<= 0: none); shared by the kernel and
 *  the decode step's primitive (attention_gqa_step_cpu.cc). */
struct KeyRange {
  bool any = false;
  int64_t offset = 0, past_lo = 0, n_past = 0, new_lo = 0, n_new = 0;
};
KeyRange KeysOfRow(int32_t seqlen, int32_t total, int S, int s, int past, int present_len, int window);

/** Whether the node's attention takes the kernel: MLX's CPU device, unless
 *  ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=0 ("portable": its portable loops even where AVX2 runs,
 *  for tests). Logs the choice under ONNXRUNTIME_EP_MLX_VERBOSE. */
bool Wanted(const OpContext& c);

/** Whether a decode step takes the whole-step primitive (attention_gqa_step.h, DecodeStepOnCpu)
 *  around the kernel: Wanted, unless ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=core (the kernel for the
 *  attention core only, the rest composed: A/B and tests). */
bool StepWanted(const OpContext& c);

/** ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=portable: the portable loops even where AVX2 runs. */
bool PortableLoops();

/** The attention output [B, H, S, D] in float32 (rows attending no key 0), exactly as
 *  attention_contrib_gqa.cc's Attend computes it; `present_len` is present's length L (a new row
 *  at offset_b + s' >= L is not attended). Fails the node on inconsistent shapes. */
mx::array Attend(const OpContext& c, const Inputs& in, int present_len);

}  // namespace gqa_cpu
}  // namespace mlx_ep
