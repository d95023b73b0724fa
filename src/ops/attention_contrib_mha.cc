// Op family: MultiHeadAttention and Attention (com.microsoft 1), ORT's AttentionCPUBase kernels.
//
//  - query [B, S, N * H]; key/value [B, L, N * H(v)] (self or cross attention, L may differ from
//    S), each plus its slice of the optional input-projection bias [N*H + N*H + N*Hv]; or key/value
//    already split into heads, [B, N, L, H] (the cross-attention cache form, no bias, no past).
//  - past_key/past_value [B, N, P, H] are prepended to K/V; present_key/present_value are the
//    concatenations [B, N, P + L, H].
//  - scores = scale * Q K^T + (attention_bias + mask), in float32 (the order ORT adds them),
//    softmax over all P + L keys, times V. The mask is ORT's: key_padding_mask [B] (key lengths:
//    keys at or past it masked), [B, P + L] or [B, S, P + L] (0 masks) give mask_filter_value
//    (default -10000) at masked keys, and unidirectional (with S > 1) gives the lowest float at
//    keys j > P + s of the rows s < S - 1 (ORT's loop skips the last row, which matters for cross
//    attention only). Masked keys are added, not removed: a fully padded row is uniform, as in ORT.
//  - Computed with MLX's scaled_dot_product_attention (an additive float32 mask; no row is ever
//    all -inf), rounded once to T.
//  - Declined: packed QKV/KV (5-D; ORT's CPU kernel lacks them), past_sequence_length and
//    cache_indirection (the decoder-masked forms), the qk output, key_padding_mask of shape
//    [3B + 2] or [B, L] with a past (ORT rejects that: with a past it takes [B, P + L]), and the
//    4-D key form with a bias or a past (ORT rejects both).
//  - Attention: input [B, S, Din] times the merged weights [Din, D + D + Dv] plus bias (float32),
//    split into Q/K/V (qkv_hidden_sizes, else thirds); past [2, B, N, P, H] prepended, present
//    [2, B, N, P + S, H]; mask_index [B] (end positions), [2B] (ends, then starts: left padding),
//    [B, T] or [B, S, T]; then the attention above. The optional bias may be absent (ORT's CPU
//    kernel crashes then). Declined: do_rotary, past_present_share_buffer / past_sequence_length,
//    4-D and [3B + 2] masks, past with attention_bias (ORT rejects it).
#include <cmath>
#include <limits>

#include "ops/attention_internal.h"
#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

enum MhaInput : size_t {
  kQuery,
  kKey,
  kValue,
  kProjBias,
  kKeyPadding,
  kAttnBias,
  kPastKey,
  kPastValue,
  kPastLen,
  kCacheIndir
};

Claim ClaimMultiHeadAttention(const NodeView& v) {
  const Node& n = v.node();
  if (auto no = DeclineUnknownAttributes(n, {"num_heads", "unidirectional", "scale", "mask_filter_value"}))
    return *no;
  if (n.AttrInt("num_heads", 0) <= 0) return Claim::No("num_heads must be positive");
  const int64_t uni = n.AttrInt("unidirectional", 0);
  if (uni != 0 && uni != 1) return Claim::No("unidirectional must be 0 or 1");
  const ElemType t = v.input_type(kQuery);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  for (size_t i : {kKey, kValue, kProjBias, kAttnBias, kPastKey, kPastValue})
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No(TypeReason(v, i, "differs from query's"));
  for (size_t i = 0; i < 3; ++i)
    if (v.has_output(i) && v.output_type(i) != t) return Claim::No("an output type differs from query's");
  if (v.has_output(3)) return Claim::No("the qk output not supported");
  if (v.has_input(kPastLen) || v.has_input(kCacheIndir))
    return Claim::No("past_sequence_length/cache_indirection (decoder-masked forms) not supported");
  if (!v.has_input(kKey) || !v.has_input(kValue))
    return Claim::No("packed QKV / KV (key or value absent) not supported");
  if (v.input_rank(kQuery) != 3) return Claim::No("query must be 3-D (packed 5-D QKV not supported)");
  const auto key_rank = v.input_rank(kKey);
  if (!key_rank || (*key_rank != 3 && *key_rank != 4) || v.input_rank(kValue) != key_rank)
    return Claim::No("key/value must both be 3-D or both 4-D");
  if (v.has_input(kPastKey) != v.has_input(kPastValue))
    return Claim::No("past_key and past_value must come together");
  if (*key_rank == 4 && (v.has_input(kProjBias) || v.has_input(kPastKey)))
    return Claim::No("4-D key/value with a bias or a past");
  if (v.has_input(kKeyPadding)) {
    if (v.input_type(kKeyPadding) != ElemType::kInt32) return Claim::No(TypeReason(v, kKeyPadding));
    const auto r = v.input_rank(kKeyPadding);
    if (!r || *r < 1 || *r > 3) return Claim::No("key_padding_mask rank must be 1, 2 or 3");
    if (*r == 1 && v.input_shape(kQuery) && v.input_shape(kKeyPadding)) {
      const int64_t b = (*v.input_shape(kQuery))[0], m = (*v.input_shape(kKeyPadding))[0];
      if (b < 0 || m != b) return Claim::No("1-D key_padding_mask other than [batch] (e.g. [3 * batch + 2])");
    } else if (*r == 1) {
      return Claim::No("1-D key_padding_mask of unknown length");
    } else if (*r == 2 && v.has_input(kPastKey)) {
      // With a past ORT takes a 2-D mask only as [B, P + L] (it rejects [B, L]).
      const auto m = v.input_shape(kKeyPadding), pk = v.input_shape(kPastKey), k = v.input_shape(kKey);
      if (!m || !pk || !k || (*pk)[2] < 0 || (*k)[1] < 0 || (*m)[1] != (*pk)[2] + (*k)[1])
        return Claim::No("2-D key_padding_mask with a past must be [batch, past + kv length]");
    }
  }
  return Claim::Yes();
}

/** Q, K, V as [B, N, *, head] with the projection bias added and past prepended. */
struct MhaHeads {
  mx::array q, k, v;
  int past_len;
};

MhaHeads HeadsOf(const OpContext& c, int heads) {
  const mx::Stream s = c.stream;
  mx::array q = c.input(kQuery), k = c.input(kKey), v = c.input(kValue);
  if (c.has_input(kProjBias)) {
    const mx::array& b = c.input(kProjBias);
    const int dq = q.shape(2), dv = v.shape(2);
    if (b.ndim() != 1 || b.shape(0) != 2 * dq + dv || k.shape(2) != dq)
      c.Fail("bias must be [hidden + hidden + v_hidden]");
    q = mx::add(q, mx::slice(b, {0}, {dq}, s), s);
    k = mx::add(k, mx::slice(b, {dq}, {2 * dq}, s), s);
    v = mx::add(v, mx::slice(b, {2 * dq}, {2 * dq + dv}, s), s);
  }
  q = SplitHeads(c, q, heads, "query");
  if (k.ndim() == 3) {
    k = SplitHeads(c, k, heads, "key");
    v = SplitHeads(c, v, heads, "value");
  }
  if (k.shape(0) != q.shape(0) || k.shape(1) != heads || k.shape(3) != q.shape(3) ||
      v.shape(0) != q.shape(0) || v.shape(1) != heads || v.shape(2) != k.shape(2))
    c.Fail("query, key and value shapes do not agree");
  int past_len = 0;
  if (c.has_input(kPastKey)) {
    const mx::array &pk = c.input(kPastKey), &pv = c.input(kPastValue);
    if (pk.ndim() != 4 || pv.ndim() != 4 || pk.shape(0) != k.shape(0) || pk.shape(1) != heads ||
        pk.shape(3) != k.shape(3) || pv.shape(0) != v.shape(0) || pv.shape(1) != heads ||
        pv.shape(3) != v.shape(3) || pv.shape(2) != pk.shape(2))
      c.Fail("past_key/past_value must be [batch, num_heads, past_length, head_size]");
    past_len = pk.shape(2);
    k = mx::concatenate({pk, k}, 2, s);
    v = mx::concatenate({pv, v}, 2, s);
  }
  return {q, k, v, past_len};
}

/** ORT's mask as float32 broadcastable to [B, 1, S, T]: mask_filter_value at padded keys, the
 *  lowest float above the causal diagonal; nullopt when there is none. */
std::optional<mx::array> MaskOf(const OpContext& c, size_t mask_input, int batch, int seq, int total,
                                int past_len) {
  const mx::Stream s = c.stream;
  const float filter = c.node.AttrFloat("mask_filter_value", -10000.f);
  const mx::array zero(0.f), filtered(filter);
  const mx::array j = mx::reshape(mx::arange(total, mx::int32, s), {1, 1, 1, total}, s);
  std::optional<mx::array> mask;
  if (c.has_input(mask_input)) {
    const mx::array& m = c.input(mask_input);
    if (m.ndim() == 1) {
      if (m.shape(0) != batch && m.shape(0) != 2 * batch) c.Fail("1-D mask must be [batch] or [2 * batch]");
      const mx::array end = mx::reshape(mx::slice(m, {0}, {batch}, s), {batch, 1, 1, 1}, s);
      mx::array keep = mx::less(j, end, s);
      if (m.shape(0) == 2 * batch)  // then the start positions: keys before them are left padding
        keep = mx::logical_and(
            keep,
            mx::greater_equal(j, mx::reshape(mx::slice(m, {batch}, {2 * batch}, s), {batch, 1, 1, 1}, s), s),
            s);
      mask = mx::where(keep, zero, filtered, s);
    } else {
      if (m.shape(0) != batch || m.shape(-1) != total || (m.ndim() == 3 && m.shape(1) != seq))
        c.Fail("key_padding_mask must be [batch, total_length] or [batch, sequence, total_length]");
      const mx::array m4 = m.ndim() == 2 ? mx::reshape(m, {batch, 1, 1, total}, s) : mx::expand_dims(m, 1, s);
      mask = mx::where(mx::greater(m4, mx::array(0, mx::int32), s), zero, filtered, s);
    }
  }
  if (c.node.AttrInt("unidirectional", 0) == 1 && seq > 1) {
    const mx::array i = mx::reshape(mx::arange(seq, mx::int32, s), {1, 1, seq, 1}, s);
    // ORT's loop leaves the last query row unmasked: the same for self attention (nothing lies
    // past P + S - 1), while a cross-attention last row attends every key.
    const mx::array future = mx::logical_and(mx::greater(j, mx::add(i, mx::array(past_len, mx::int32), s), s),
                                             mx::less(i, mx::array(seq - 1, mx::int32), s), s);
    const mx::array lowest(std::numeric_limits<float>::lowest());
    mask = mx::where(future, lowest, mask ? *mask : zero, s);
  }
  return mask;
}

/** Attention over Q [B, N, S, H], K/V [B, N, T, H(v)] (past included) as ORT's AttentionCPUBase:
 *  float32 scores with bias + mask added, softmax, times V; [B, S, N * Hv] in T. */
mx::array AttendHeads(const OpContext& c, const mx::array& q, const mx::array& k, const mx::array& v,
                      int past_len, size_t mask_input, size_t bias_input) {
  const mx::Stream s = c.stream;
  const int batch = q.shape(0), seq = q.shape(2), total = k.shape(2);
  const float scale_attr = c.node.AttrFloat("scale", 0.f);
  const float scale = scale_attr == 0.f ? 1.f / std::sqrt(static_cast<float>(q.shape(3))) : scale_attr;
  std::optional<mx::array> add = MaskOf(c, mask_input, batch, seq, total, past_len);
  if (c.has_input(bias_input)) {
    const mx::array bias = mx::astype(c.input(bias_input), mx::float32, s);
    if (bias.ndim() != 4 || bias.shape(2) != seq || bias.shape(3) != total)
      c.Fail("attention_bias must be [batch or 1, num_heads or 1, sequence, total_length]");
    add = add ? mx::add(bias, *add, s) : bias;
  }
  const mx::array y = mx::fast::scaled_dot_product_attention(
      mx::astype(q, mx::float32, s), mx::astype(k, mx::float32, s), mx::astype(v, mx::float32, s), scale,
      add ? "array" : "", add, std::nullopt, false, s);
  return mx::astype(MergeHeads(y, s), q.dtype(), s);
}

std::vector<mx::array> TranslateMultiHeadAttention(const OpContext& c) {
  const auto [q, k, v, past_len] = HeadsOf(c, static_cast<int>(c.node.AttrInt("num_heads", 0)));
  std::vector<mx::array> outs = {AttendHeads(c, q, k, v, past_len, kKeyPadding, kAttnBias)};
  if (c.num_outputs() > 1) outs.push_back(k);
  if (c.num_outputs() > 2) outs.push_back(v);
  while (outs.size() < c.num_outputs())
    outs.push_back(mx::zeros({0}, q.dtype(), c.stream));  // unused qk slot
  return outs;
}

enum AttentionInput : size_t { kInput, kWeights, kQkvBias, kMaskIndex, kPast, kBiasQk, kPastSeqLen };

Claim ClaimContribAttention(const NodeView& v) {
  const Node& n = v.node();
  if (auto no = DeclineUnknownAttributes(n, {"num_heads", "unidirectional", "scale", "mask_filter_value",
                                             "qkv_hidden_sizes", "do_rotary", "past_present_share_buffer",
                                             "rotary_embedding_dim"}))
    return *no;
  if (n.AttrInt("num_heads", 0) <= 0) return Claim::No("num_heads must be positive");
  if (n.AttrInt("do_rotary", 0) != 0) return Claim::No("do_rotary not supported");
  if (n.AttrInt("past_present_share_buffer", 0) != 0 || v.has_input(kPastSeqLen))
    return Claim::No("past_present_share_buffer / past_sequence_length not supported");
  const int64_t uni = n.AttrInt("unidirectional", 0);
  if (uni != 0 && uni != 1) return Claim::No("unidirectional must be 0 or 1");
  const ElemType t = v.input_type(kInput);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  for (size_t i : {kWeights, kQkvBias, kPast, kBiasQk})
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No(TypeReason(v, i, "differs from input's"));
  for (size_t i = 0; i < 2; ++i)
    if (v.has_output(i) && v.output_type(i) != t) return Claim::No("an output type differs from input's");
  if (v.num_outputs() > 2 && v.has_output(2)) return Claim::No("output 2 not supported");
  if (v.input_rank(kInput) != 3 || v.input_rank(kWeights) != 2)
    return Claim::No("input must be 3-D, weights 2-D");
  if (v.has_input(kPast) && !v.has_output(1)) return Claim::No("past without the present output");
  if (v.has_input(kPast) && v.has_input(kBiasQk))
    return Claim::No("past with attention_bias (ORT rejects it)");
  if (v.has_input(kMaskIndex)) {
    if (v.input_type(kMaskIndex) != ElemType::kInt32) return Claim::No(TypeReason(v, kMaskIndex));
    const auto m = v.input_shape(kMaskIndex), in = v.input_shape(kInput);
    if (!m || m->empty() || m->size() > 3)
      return Claim::No("mask_index must have rank 1, 2 or 3 (4-D not supported)");
    if (m->size() == 1 && (!in || (*in)[0] < 0 || ((*m)[0] != (*in)[0] && (*m)[0] != 2 * (*in)[0])))
      return Claim::No("1-D mask_index other than [batch] or [2 * batch] (e.g. [3 * batch + 2])");
  }
  return Claim::Yes();
}

std::vector<mx::array> TranslateContribAttention(const OpContext& c) {
  const mx::Stream s = c.stream;
  const int heads = static_cast<int>(c.node.AttrInt("num_heads", 0));
  const mx::array &x = c.input(kInput), &w = c.input(kWeights);
  if (w.shape(0) != x.shape(2)) c.Fail("weights must be [input_hidden_size, hidden + hidden + v_hidden]");
  std::vector<int64_t> sizes = c.node.AttrInts("qkv_hidden_sizes").value_or(std::vector<int64_t>{});
  if (sizes.empty()) sizes.assign(3, w.shape(1) / 3);
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[0] + sizes[1] + sizes[2] != w.shape(1))
    c.Fail("qkv_hidden_sizes must be [hidden, hidden, v_hidden] summing to the weights' columns");
  // The projection in float32, as ORT's CPU kernel (its GEMM accumulates onto the bias).
  mx::array qkv = mx::matmul(mx::astype(x, mx::float32, s), mx::astype(w, mx::float32, s), s);
  if (c.has_input(kQkvBias)) qkv = mx::add(qkv, mx::astype(c.input(kQkvBias), mx::float32, s), s);
  qkv = mx::astype(qkv, x.dtype(), s);
  const int d = static_cast<int>(sizes[0]), dv = static_cast<int>(sizes[2]);
  auto part = [&](int from, int to) {
    return mx::slice(qkv, {0, 0, from}, {qkv.shape(0), qkv.shape(1), to}, s);
  };
  const mx::array q = SplitHeads(c, part(0, d), heads, "Q");
  mx::array k = SplitHeads(c, part(d, 2 * d), heads, "K"),
            v = SplitHeads(c, part(2 * d, 2 * d + dv), heads, "V");
  int past_len = 0;
  if (c.has_input(kPast)) {
    const mx::array& past = c.input(kPast);
    if (past.ndim() != 5 || past.shape(0) != 2 || past.shape(1) != q.shape(0) || past.shape(2) != heads ||
        past.shape(4) != k.shape(3) || d != dv)
      c.Fail("past must be [2, batch, num_heads, past_length, head_size] (and hidden sizes equal)");
    past_len = past.shape(3);
    const mx::Shape one = {1, past.shape(1), heads, past_len, past.shape(4)};
    k = mx::concatenate({mx::squeeze(mx::slice(past, {0, 0, 0, 0, 0}, one, s), 0, s), k}, 2, s);
    v = mx::concatenate(
        {mx::squeeze(mx::slice(past, {1, 0, 0, 0, 0}, {2, one[1], one[2], one[3], one[4]}, s), 0, s), v}, 2,
        s);
  }
  std::vector<mx::array> outs = {AttendHeads(c, q, k, v, past_len, kMaskIndex, kBiasQk)};
  if (c.num_outputs() > 1) outs.push_back(mx::stack({k, v}, 0, s));
  while (outs.size() < c.num_outputs()) outs.push_back(mx::zeros({0}, x.dtype(), s));
  return outs;
}

}  // namespace

void RegisterContribAttentionOps(OpRegistry& r) {
  r.Add({"com.microsoft", "MultiHeadAttention", 1, 1, ClaimMultiHeadAttention, TranslateMultiHeadAttention});
  r.Add({"com.microsoft", "Attention", 1, 1, ClaimContribAttention, TranslateContribAttention});
}

}  // namespace mlx_ep
