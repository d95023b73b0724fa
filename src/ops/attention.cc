// Op family: Attention (ai.onnx 23-24), composed as matmul + softmax + matmul.
//
//  - Q, K, V are 4-D [B, heads, S, head_size], or 3-D [B, S, heads * head_size] with the
//    q_num_heads / kv_num_heads attributes (split into heads and transposed, and back for Y).
//  - past_key / past_value are concatenated before K / V along the sequence axis (present_*).
//  - Grouped-query attention: query head h reads kv head h / (q_heads / kv_heads); computed as a
//    broadcast matmul over [B, kv_heads, group, S, head_size] instead of repeating K and V.
//  - The computation follows the ONNX definition step by step in the input type T, each step
//    rounded to T as the ONNX reference (and the backend tests' expected data) does:
//    Q*sqrt(scale), K*sqrt(scale), Q @ K^T, softcap (tanh(x/c)*c), + bias, softmax (in
//    softmax_precision when given), P @ V. Sums of the softmax run in float32 and round once
//    (numpy's float16 pairwise sum does the same); exp and divisions are float32 rounded to T.
//    With softcap the scores are float32 from the softcap to the softmax, as in the reference
//    (its float32 softcap scalar promotes them). float16 results are bit-exact with the
//    reference on the tests; ORT's float16 kernel rounds less often (softmax in float32) and is
//    ~7e-4 of the output scale away from both (it fails ONNX's test_attention_4d_causal_fp16).
//  - The bias: a bool attn_mask gives 0 / -inf, a float one is added as is; a mask shorter than
//    the total kv length is padded with -inf. is_causal adds a bottom-right aligned causal mask:
//    query i attends key j iff j <= i + offset, offset = past length, or nonpad_kv_seqlen[b] - S
//    with nonpad_kv_seqlen (opset 24) and no past. nonpad_kv_seqlen also masks keys >= its value.
//  - A query row whose bias is -inf everywhere yields zeros (Y and the mode-3 output), as ONNX
//    specifies. (ORT's CPU kernel masks with the lowest finite value and yields a uniform row.)
//  - qk_matmul_output (output 3): mode 0 raw scaled Q @ K^T, 1 after softcap, 2 after the bias,
//    3 the softmax. Mode 0 with softcap is declined: the ONNX reference then returns the
//    softcapped scores while ORT returns the raw ones.
//  - Declined: float64 (ORT has no kernel), integer masks, softmax_precision float64, and
//    attributes of later opsets (sliding windows of Attention-25).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ops/attention_internal.h"
#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

constexpr std::initializer_list<ElemType> kAttentionTypes = {ElemType::kFloat, ElemType::kFloat16,
                                                             ElemType::kBFloat16};

/** The dtype softmax runs in: softmax_precision (an ONNX element type) or T. */
std::optional<mx::Dtype> SoftmaxDtype(int64_t precision, mx::Dtype t) {
  switch (precision) {
    case 0:
      return t;
    case 1:
      return mx::float32;
    case 10:
      return mx::float16;
    case 16:
      return mx::bfloat16;
    default:
      return std::nullopt;
  }
}

Claim ClaimAttention(const NodeView& v) {
  const Node& n = v.node();
  // The attributes of Attention 23/24 (later ones, e.g. sliding windows, are declined).
  if (auto no = DeclineUnknownAttributes(n, {"is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode",
                                             "scale", "softcap", "softmax_precision"}))
    return *no;
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, kAttentionTypes)) return Claim::No(TypeReason(v, 0));
  for (size_t i : {1, 2, 4, 5})
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No("Q, K, V, past_key/value differ in type");
  for (size_t i = 0; i < v.num_outputs(); ++i)
    if (v.has_output(i) && v.output_type(i) != t) return Claim::No("an output type differs from Q's");
  if (v.has_input(3) && v.input_type(3) != ElemType::kBool && v.input_type(3) != t)
    return Claim::No("attn_mask has type " + ElemName(v.input_type(3)) + " (bool or Q's type taken)");
  if (v.has_input(4) != v.has_input(5)) return Claim::No("past_key and past_value must come together");
  if (v.has_input(6) && v.has_input(4)) return Claim::No("nonpad_kv_seqlen together with past_key");
  const auto rank = v.input_rank(0);
  if (!rank || (*rank != 3 && *rank != 4)) return Claim::No("Q rank is unknown or not 3/4");
  for (size_t i : {1, 2})
    if (v.input_rank(i) != rank) return Claim::No("Q, K, V ranks differ");
  if (*rank == 3 && (n.AttrInt("q_num_heads", 0) <= 0 || n.AttrInt("kv_num_heads", 0) <= 0))
    return Claim::No("3-D inputs without q_num_heads/kv_num_heads");
  if (!SoftmaxDtype(n.AttrInt("softmax_precision", 0), mx::float32))
    return Claim::No("softmax_precision=" + std::to_string(n.AttrInt("softmax_precision", 0)) +
                     " not supported");
  const int64_t mode = n.AttrInt("qk_matmul_output_mode", 0);
  if (v.has_output(3)) {
    if (mode < 0 || mode > 3) return Claim::No("qk_matmul_output_mode=" + std::to_string(mode));
    if (mode == 0 && n.AttrFloat("softcap", 0.f) > 0.f)
      return Claim::No(
          "qk_matmul_output_mode=0 with softcap: the ONNX reference outputs the softcapped "
          "scores, ORT the raw ones");
  }
  if (n.AttrFloat("scale", 1.f) <= 0.f) return Claim::No("scale must be positive");
  return Claim::Yes();
}

/** where(allowed, 0, -inf) in dtype t. */
mx::array AllowedToBias(const mx::array& allowed, mx::Dtype t, mx::Stream s) {
  return mx::where(allowed, mx::array(0.f, t), mx::array(-INFINITY, t), s);
}

/** The additive bias (broadcastable to [B, H, S, L]) from attn_mask, is_causal, nonpad_kv_seqlen;
 *  nullopt when there is none. */
std::optional<mx::array> AttentionBias(const OpContext& c, mx::Dtype t, int batch, int q_len, int kv_len,
                                       int past_len) {
  const mx::Stream s = c.stream;
  std::optional<mx::array> bias;
  if (c.has_input(3)) {
    mx::array m = c.input(3);
    if (m.ndim() == 0 || m.ndim() > 4) c.Fail("attn_mask must have rank 1 to 4");
    if (m.dtype() == mx::bool_) m = AllowedToBias(m, t, s);
    const int pad = kv_len - m.shape(-1);
    if (pad < 0) c.Fail("attn_mask is longer than the total kv sequence length");
    if (pad > 0) {
      std::vector<std::pair<int, int>> widths(m.ndim(), {0, 0});
      widths.back() = {0, pad};
      m = mx::pad(m, widths, mx::array(-INFINITY, t), "constant", s);
    }
    bias = m;
  }
  std::optional<mx::array> nonpad;
  if (c.has_input(6)) {
    nonpad = mx::astype(mx::reshape(c.input(6), {-1, 1, 1, 1}, s), mx::int32, s);  // [B, 1, 1, 1]
    if (nonpad->shape(0) != batch) c.Fail("nonpad_kv_seqlen must hold batch_size values");
    c.Require(mx::logical_and(mx::greater_equal(*nonpad, mx::array(0, mx::int32), s),
                              mx::less_equal(*nonpad, mx::array(kv_len, mx::int32), s), s),
              "nonpad_kv_seqlen is out of range [0, total_sequence_length]");
  }
  const mx::array j = mx::reshape(mx::arange(kv_len, mx::int32, s), {1, kv_len}, s);
  if (c.node.AttrInt("is_causal", 0) == 1) {
    const mx::array i = mx::reshape(mx::arange(q_len, mx::int32, s), {q_len, 1}, s);
    const mx::array offset =
        nonpad ? mx::subtract(*nonpad, mx::array(q_len, mx::int32), s) : mx::array(past_len, mx::int32);
    const mx::array causal = AllowedToBias(mx::less_equal(j, mx::add(i, offset, s), s), t, s);
    bias = bias ? mx::add(*bias, causal, s) : causal;
  }
  if (nonpad) {
    const mx::array padding = AllowedToBias(mx::less(j, *nonpad, s), t, s);  // [B, 1, 1, L]
    bias = bias ? mx::add(*bias, padding, s) : padding;
  }
  return bias;
}

// exp and division computed in float32 and rounded to x's dtype, like numpy's float16
// ufuncs (the ONNX reference): MLX's float16 versions are not always correctly rounded.
mx::array F32(const mx::array& x, mx::Stream s) { return mx::astype(x, mx::float32, s); }
mx::array Exp(const mx::array& x, mx::Stream s) { return mx::astype(mx::exp(F32(x, s), s), x.dtype(), s); }
mx::array Divide(const mx::array& a, const mx::array& b, mx::Stream s) {
  return mx::astype(mx::divide(F32(a, s), F32(b, s), s), a.dtype(), s);
}

/** Softmax over the last axis in x's dtype, with float32 sums; an all -inf row gives zeros. */
mx::array Softmax(const mx::array& x, mx::Stream s) {
  const mx::Dtype t = x.dtype();
  const mx::array row_max = mx::max(x, -1, true, s);
  const mx::array zero = mx::array(0.f, t);
  const mx::array safe_max = mx::where(mx::isneginf(row_max, s), zero, row_max, s);
  const mx::array e = Exp(mx::subtract(x, safe_max, s), s);
  mx::array sum = mx::astype(mx::sum(mx::astype(e, mx::float32, s), -1, true, s), t, s);
  sum = mx::where(mx::equal(sum, zero, s), mx::array(1.f, t), sum, s);
  return Divide(e, sum, s);
}

/** Q, K, V as [B, heads, S, D], past_key/past_value prepended to K and V (present_*). */
struct HeadInputs {
  mx::array q, k, v;
  int past_len;
};

HeadInputs ToHeads(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  mx::array q = c.input(0), k = c.input(1), v = c.input(2);
  if (q.ndim() == 3) {
    q = SplitHeads(c, q, static_cast<int>(n.AttrInt("q_num_heads", 0)), "Q");
    k = SplitHeads(c, k, static_cast<int>(n.AttrInt("kv_num_heads", 0)), "K");
    v = SplitHeads(c, v, static_cast<int>(n.AttrInt("kv_num_heads", 0)), "V");
  }
  const int batch = q.shape(0), heads = q.shape(1), kv_heads = k.shape(1);
  if (k.shape(0) != batch || v.shape(0) != batch || v.shape(1) != kv_heads || k.shape(3) != q.shape(3))
    c.Fail("Q, K, V shapes do not agree");
  // heads == 0 passed the multiple test and then divided by zero (SIGFPE) in GroupedMatmul.
  if (heads <= 0) c.Fail("Q number of heads must be greater than 0");
  if (kv_heads == 0 || heads % kv_heads != 0) c.Fail("q heads are not a multiple of kv heads");
  const int past_len = c.has_input(4) ? c.input(4).shape(2) : 0;
  if (c.has_input(4)) {
    const mx::array &pk = c.input(4), &pv = c.input(5);
    if (pk.ndim() != 4 || pv.ndim() != 4 || pk.shape(0) != batch || pv.shape(0) != batch ||
        pk.shape(1) != kv_heads || pv.shape(1) != kv_heads || pk.shape(3) != k.shape(3) ||
        pv.shape(3) != v.shape(3) || pk.shape(2) != pv.shape(2))
      c.Fail("past_key/past_value must be [batch, kv_heads, past_length, head_size] like K/V");
    k = mx::concatenate({pk, k}, 2, s);
    v = mx::concatenate({pv, v}, 2, s);
  }
  if (k.shape(2) != v.shape(2)) c.Fail("K and V sequence lengths differ");
  if (v.shape(3) <= 0) c.Fail("V head size must be greater than 0");
  if (q.shape(2) == 0) c.Fail("Q sequence length must be greater than 0");  // as ORT's checkParameters
  if (k.shape(2) == 0) c.Fail("the total kv sequence length is 0 (softmax over no keys)");
  return {q, k, v, past_len};
}

/** A float whose rounding to `t` equals x's: x itself rounded for float32, and for float16/
 *  bfloat16 x rounded to odd (which keeps the later rounding from being a double rounding). */
float ToFloatForRounding(double x, mx::Dtype t) {
  float f = static_cast<float>(x);
  if (t == mx::float32 || static_cast<double>(f) == x) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/** (Q * sqrt(scale)) @ (K * sqrt(scale))^T, sqrt(scale) rounded to T (ONNX's pattern and
 *  reference): [B, H, S, L]. */
mx::array ScaledScores(const OpContext& c, const mx::array& q, const mx::array& k, int groups) {
  const mx::Stream s = c.stream;
  const float scale_attr = c.node.AttrFloat("scale", NAN);
  // The reference: the default scale in double rounded once to T, an attribute's sqrt in float32.
  const float sqrt_scale =
      std::isnan(scale_attr)
          ? ToFloatForRounding(std::sqrt(1.0 / std::sqrt(static_cast<double>(q.shape(3)))), q.dtype())
          : std::sqrt(scale_attr);
  const mx::array sq = mx::astype(mx::array(sqrt_scale), q.dtype(), s);
  const mx::array kt = mx::swapaxes(mx::multiply(k, sq, s), 2, 3, s);
  return GroupedMatmul(mx::multiply(q, sq, s), kt, groups, s);
}

std::vector<mx::array> TranslateAttention(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const auto [q, k, v, past_len] = ToHeads(c);
  const mx::Dtype t = q.dtype();
  const int batch = q.shape(0), heads = q.shape(1), q_len = q.shape(2), kv_len = k.shape(2);
  const int groups = heads / k.shape(1);

  mx::array qk = ScaledScores(c, q, k, groups);
  const mx::array raw_qk = qk;
  const float softcap = n.AttrFloat("softcap", 0.f);
  if (softcap > 0.f) {
    // In float32 from here to the softmax (also for float16/bfloat16 T): the ONNX reference's
    // softcap is a float32 scalar, which promotes the scores (ORT too computes it in float32).
    const mx::array cap = mx::array(softcap, mx::float32);
    qk = mx::multiply(mx::tanh(mx::divide(F32(qk, s), cap, s), s), cap, s);
  }
  const mx::array capped_qk = qk;
  const std::optional<mx::array> bias = AttentionBias(c, t, batch, q_len, kv_len, past_len);
  if (bias) {
    const mx::Shape& bs = bias->shape();
    for (size_t d = 1; d <= bs.size(); ++d)
      if (bs[bs.size() - d] != 1 && bs[bs.size() - d] != qk.shape(-static_cast<int>(d)))
        c.Fail("attn_mask does not broadcast to [batch, heads, q_length, kv_length]");
    qk = mx::add(qk, *bias, s);
  }
  const mx::array biased_qk = qk;

  const mx::Dtype sm_t = *SoftmaxDtype(n.AttrInt("softmax_precision", 0), qk.dtype());
  mx::array probs = Softmax(mx::astype(qk, sm_t, s), s);
  if (bias) {
    // A row with no attendable key is zero (decided on the bias, not on the scores).
    const mx::array all_masked = mx::isneginf(mx::max(*bias, -1, true, s), s);
    probs = mx::where(all_masked, mx::array(0.f, sm_t), probs, s);
  }
  probs = mx::astype(probs, t, s);
  mx::array y = GroupedMatmul(probs, v, groups, s);  // [B, H, S, Dv]
  if (c.input(0).ndim() == 3) y = MergeHeads(y, s);

  std::vector<mx::array> outs = {y};
  if (c.num_outputs() > 1) outs.push_back(k);
  if (c.num_outputs() > 2) outs.push_back(v);
  if (c.num_outputs() > 3) {
    const int64_t mode = n.AttrInt("qk_matmul_output_mode", 0);
    const mx::array qk_out = mode == 0 ? raw_qk : mode == 1 ? capped_qk : mode == 2 ? biased_qk : probs;
    outs.push_back(mx::broadcast_to(mx::astype(qk_out, t, s), {batch, heads, q_len, kv_len}, s));
  }
  return outs;
}

}  // namespace

void RegisterAttentionOps(OpRegistry& r) {
  r.Add({"", "Attention", 23, 24, ClaimAttention, TranslateAttention});
}

}  // namespace mlx_ep
