// GroupQueryAttention's claim: what the translation (attention_contrib_gqa.cc) computes as ORT's
// CPU kernel does, and the reason for each decline.
#include <string>

#include "ops/attention_contrib_gqa_internal.h"
#include "ops/claim_util.h"

namespace mlx_ep {
namespace {

Claim ClaimAttributes(const Node& n) {
  if (auto no = DeclineUnknownAttributes(
          n, {"num_heads", "kv_num_heads", "scale", "softcap", "local_window_size", "do_rotary",
              "rotary_interleaved", "smooth_softmax", "causal", "qk_output", "sliding_window_cache",
              "k_quant_type", "v_quant_type", "kv_cache_bit_width", "qk_norm_epsilon"}))
    return *no;
  const int64_t heads = n.AttrInt("num_heads", 0), kv_heads = n.AttrInt("kv_num_heads", 0);
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    return Claim::No("num_heads must be a positive multiple of kv_num_heads");
  if (n.AttrInt("causal", 1) != 1) return Claim::No("causal=0 (bidirectional) not supported");
  if (n.AttrInt("qk_output", 0) != 0) return Claim::No("qk_output not supported");
  if (n.AttrInt("sliding_window_cache", 0) != 0) return Claim::No("sliding_window_cache not supported");
  if (n.AttrString("k_quant_type", "NONE") != "NONE" || n.AttrString("v_quant_type", "NONE") != "NONE" ||
      n.AttrInt("kv_cache_bit_width", 0) != 0)
    return Claim::No("quantized KV caches not supported");
  const int64_t window = n.AttrInt("local_window_size", -1);
  if (window == 0 || window < -1) return Claim::No("local_window_size=" + std::to_string(window));
  const int64_t rotary = n.AttrInt("do_rotary", 0), interleaved = n.AttrInt("rotary_interleaved", 0);
  if ((rotary != 0 && rotary != 1) || (interleaved != 0 && interleaved != 1))
    return Claim::No("do_rotary/rotary_interleaved must be 0 or 1");
  return Claim::Yes();
}

}  // namespace

Claim ClaimGroupQueryAttention(const NodeView& v) {
  const Node& n = v.node();
  if (Claim a = ClaimAttributes(n); !a.ok) return a;
  const ElemType t = v.input_type(kQuery);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  for (size_t i : {kKey, kValue, kPastKey, kPastValue, kCos, kSin, kBias, kHeadSink})
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No(TypeReason(v, i, "differs from query's"));
  for (size_t i : {kKScale, kVScale, kQNorm, kKNorm})
    if (v.has_input(i))
      return Claim::No("input " + std::to_string(i) + " (k/v scales or q/k norm weights) not supported");
  if (v.has_input(kPositionIds) &&
      (v.input_type(kPositionIds) != ElemType::kInt64 || n.AttrInt("do_rotary", 0) != 1))
    return Claim::No("position_ids must be int64 and come with do_rotary=1");
  if (v.has_output(3)) return Claim::No("output_qk not supported");
  for (size_t i = 0; i < 3; ++i)
    if (v.has_output(i) && v.output_type(i) != t) return Claim::No("an output type differs from query's");
  if (v.has_input(kKey) != v.has_input(kValue)) return Claim::No("key and value must come together");
  if (v.has_input(kPastKey) != v.has_input(kPastValue))
    return Claim::No("past_key and past_value must come together");
  if (v.has_input(kPastKey) && (!v.has_output(1) || !v.has_output(2)))
    return Claim::No("past_key without the present_key/present_value outputs");
  if (!v.has_input(kSeqlensK) || v.input_type(kSeqlensK) != ElemType::kInt32 || !v.has_input(kTotalLength) ||
      v.input_type(kTotalLength) != ElemType::kInt32)
    return Claim::No("seqlens_k and total_sequence_length must be int32");
  if (v.has_input(kCos) != v.has_input(kSin)) return Claim::No("cos_cache and sin_cache must come together");
  if ((n.AttrInt("do_rotary", 0) == 1) != v.has_input(kCos))
    return Claim::No("cos_cache/sin_cache are given exactly when do_rotary=1");
  if (v.has_input(kHeadSink) && n.AttrInt("smooth_softmax", 0) == 1)
    return Claim::No("head_sink together with smooth_softmax (ORT rejects it)");
  if (v.input_rank(kQuery) != 3) return Claim::No("query must have rank 3");
  if (auto ks = v.input_shape(kKey); ks && ks->size() == 3 && (*ks)[1] == 0)
    return Claim::No("key of sequence length 0 (the shared-KV form) not supported");
  return Claim::Yes();
}

}  // namespace mlx_ep
