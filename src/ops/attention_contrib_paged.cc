// Op family: PagedAttention (com.microsoft 1), following ORT's CUDA kernel (ORT has no CPU one).
//
//  - Tokens are packed across sequences: query [T, H * D] with key/value [T, Hkv * D], or packed
//    QKV [T, (H + 2 Hkv) * D]. cumulative_sequence_length [B + 1] and past_seqlens [B] (int32) are
//    data, never host values: they change every step and the compiled graph must not. Token t
//    belongs to sequence b = #{b' : cumulative[b' + 1] <= t} and sits at position
//    p = past_seqlens[b] + t - cumulative[b] of that sequence.
//  - key_cache/value_cache [num_blocks, block_size, Hkv, D]: position p of sequence b is slot
//    block_table[b, p / block_size] * block_size + p % block_size of the cache viewed as
//    [num_blocks * block_size, Hkv, D]. The new K/V rows are scattered into their slots (the
//    slot_mapping input gives the slots instead when present; a negative or out-of-range slot, or
//    an unmapped block, skips the write, as ORT's ReshapeAndCache does). ORT's CUDA EP requires
//    the cache outputs to alias the inputs: they are declared in-place updates, a few rows per
//    block (attention_contrib_paged_cache.cc).
//  - Attention reads the updated caches through block_table (static shape [B, M]: every
//    sequence's capacity L = M * block_size positions is gathered and masked, so one compile
//    serves every step). Query at position p attends cached positions j <= p (is_causal, bottom
//    right aligned), and j > p - local_window_size with a window (ORT passes FlashAttention
//    window_size_left = local_window_size - 1), skipping unmapped blocks as ORT's decode kernel
//    does (its gather path reads them as zero keys instead: ORT leaves an unmapped block inside a
//    sequence's live length unspecified; past it, the causal mask hides it in every backend).
//  - Scores are float32 (fp16/bf16 widened first): scale * Q K^T, softcap * tanh(x / softcap),
//    softmax with head_sink as an extra logit in the denominator, times V, rounded once to T.
//    q_norm_weight/k_norm_weight: RMSNorm over head_size in float32, rounded to T, before
//    rotary (the K written to the cache is normalised and rotated). do_rotary rotates Q and K at
//    position p with cos_cache/sin_cache [max_position, rotary_dim / 2], in float32 rounded to T.
//  - Two static layouts of the same computation, chosen from the shapes: per token (each token's
//    own sequence gathered, [T, L] keys: decode steps) or per sequence (the tokens of each
//    sequence padded to T rows, [B, T, L] scores: prefill).
//  - The checks ORT's kernel makes on lengths (cumulative starting at 0, non-decreasing, ending at
//    T; past_seqlens + new tokens within a sequence's capacity) fail the run (OpContext::Require).
//  - Declined: float32 (not in the schema: T is float16/bfloat16), quantized caches (k/v_scale,
//    k/v_quant_type, int8/fp8 caches), caches of another type than query, the LATENT (MLA)
//    layout, rotary_offset, is_causal=0, local_window_size 0 or below -1.
#include <algorithm>
#include <cmath>

#include "ops/attention_internal.h"
#include "ops/attention_paged_internal.h"
#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace paged {
namespace {

Claim ClaimAttributes(const Node& n) {
  if (auto no = DeclineUnknownAttributes(
          n, {"num_heads", "kv_num_heads", "scale", "softcap", "local_window_size", "do_rotary",
              "rotary_interleaved", "is_causal", "qk_norm_epsilon", "k_quant_type", "v_quant_type",
              "k_cache_dtype", "v_cache_dtype", "kv_cache_layout", "v_head_size", "rotary_offset"}))
    return *no;
  const int64_t heads = n.AttrInt("num_heads", 0), kv_heads = n.AttrInt("kv_num_heads", 0);
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    return Claim::No("num_heads must be a positive multiple of kv_num_heads");
  if (n.AttrInt("is_causal", 1) != 1) return Claim::No("is_causal=0 (bidirectional) not supported");
  if (n.AttrString("kv_cache_layout", "SEPARATE") != "SEPARATE")
    return Claim::No("kv_cache_layout LATENT (absorbed MLA) not supported");
  if (n.AttrString("k_quant_type", "NONE") != "NONE" || n.AttrString("v_quant_type", "NONE") != "NONE")
    return Claim::No("quantized KV caches not supported");
  if (n.AttrInt("rotary_offset", 0) != 0) return Claim::No("rotary_offset not supported");
  const int64_t window = n.AttrInt("local_window_size", -1);
  if (window == 0 || window < -1) return Claim::No("local_window_size=" + std::to_string(window));
  const int64_t rotary = n.AttrInt("do_rotary", 0), interleaved = n.AttrInt("rotary_interleaved", 0);
  if ((rotary != 0 && rotary != 1) || (interleaved != 0 && interleaved != 1))
    return Claim::No("do_rotary/rotary_interleaved must be 0 or 1");
  const float eps = n.AttrFloat("qk_norm_epsilon", 1e-6f);
  if (!(std::isfinite(eps) && eps > 0.f)) return Claim::No("qk_norm_epsilon must be positive and finite");
  return Claim::Yes();
}

/** head_size from the static query shape (0 when unknown). */
int64_t StaticHeadSize(const NodeView& v) {
  const auto shape = v.input_shape(kQuery);
  if (!shape || shape->size() != 2 || (*shape)[1] < 0) return 0;
  const int64_t heads = v.node().AttrInt("num_heads", 1), kv_heads = v.node().AttrInt("kv_num_heads", 1);
  return (*shape)[1] / (v.has_input(kKey) ? heads : heads + 2 * kv_heads);
}

Claim ClaimCacheTypes(const NodeView& v, ElemType t) {
  const std::string name = t == ElemType::kFloat16 ? "float16" : "bfloat16";
  for (const char* attr : {"k_cache_dtype", "v_cache_dtype"}) {
    const std::string d = v.node().AttrString(attr, "");
    if (!d.empty() && d != name) return Claim::No(std::string(attr) + "=" + d + " (a quantized cache)");
  }
  const int64_t v_head = v.node().AttrInt("v_head_size", 0);
  if (v_head != 0 && v_head != StaticHeadSize(v)) return Claim::No("v_head_size other than head_size");
  return Claim::Yes();
}

Claim ClaimPagedAttention(const NodeView& v) {
  const Node& n = v.node();
  if (Claim a = ClaimAttributes(n); !a.ok) return a;
  const ElemType t = v.input_type(kQuery);
  if (!IsOneOf(t, {ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0, "PagedAttention's T is float16 or bfloat16"));
  if (!v.has_input(kValueCache)) return Claim::No("value_cache absent (the LATENT layout)");
  for (size_t i : {kKey, kValue, kKeyCache, kValueCache, kCos, kSin, kHeadSink, kQNorm, kKNorm})
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No(TypeReason(v, i, "differs from query's"));
  for (size_t i : {kCumulative, kPastLengths, kBlockTable, kSlotMapping})
    if (v.has_input(i) && v.input_type(i) != ElemType::kInt32)
      return Claim::No(TypeReason(v, i, "not int32"));
  if (v.has_input(kKScale) || v.has_input(kVScale)) return Claim::No("k_scale/v_scale (quantized caches)");
  if (v.has_input(kKey) != v.has_input(kValue)) return Claim::No("key and value must come together");
  if (v.has_input(kQNorm) != v.has_input(kKNorm))
    return Claim::No("q_norm_weight and k_norm_weight must come together");
  if (v.has_input(kCos) != v.has_input(kSin)) return Claim::No("cos_cache and sin_cache must come together");
  if (n.AttrInt("do_rotary", 0) == 1 && !v.has_input(kCos)) return Claim::No("do_rotary=1 without cos_cache");
  for (size_t i = 0; i < 3; ++i)
    if (v.has_output(i) && v.output_type(i) != t) return Claim::No("an output type differs from query's");
  if (auto r = v.input_rank(kQuery); r && *r != 2) return Claim::No("query must have rank 2");
  if (auto r = v.input_rank(kKeyCache); r && *r != 4) return Claim::No("key_cache must have rank 4");
  return ClaimCacheTypes(v, t);
}

Geometry GeometryOf(const OpContext& c) {
  const Node& n = c.node;
  Geometry g{};
  g.heads = static_cast<int>(n.AttrInt("num_heads", 0));
  g.kv_heads = static_cast<int>(n.AttrInt("kv_num_heads", 0));
  const mx::array& q = c.input(kQuery);
  if (q.ndim() != 2) c.Fail("query must be [tokens, hidden]");
  g.tokens = q.shape(0);
  g.head_size = q.shape(1) / (c.has_input(kKey) ? g.heads : g.heads + 2 * g.kv_heads);
  if (g.head_size == 0 || g.head_size % 8 != 0) c.Fail("head_size must be a positive multiple of 8");
  const mx::array &kc = c.input(kKeyCache), &vc = c.input(kValueCache);
  if (kc.ndim() != 4 || kc.shape() != vc.shape() || kc.shape(2) != g.kv_heads || kc.shape(3) != g.head_size)
    c.Fail("key_cache/value_cache must be [num_blocks, block_size, kv_num_heads, head_size]");
  g.blocks = kc.shape(0);
  g.block_size = kc.shape(1);
  if (g.block_size < 16 || (g.block_size & (g.block_size - 1)) != 0)
    c.Fail("block_size must be a power of two and at least 16");
  const mx::array &cum = c.input(kCumulative), &table = c.input(kBlockTable);
  if (cum.ndim() != 1 || cum.shape(0) < 2) c.Fail("cumulative_sequence_length must be [batch_size + 1]");
  g.batch = cum.shape(0) - 1;
  if (c.input(kPastLengths).ndim() != 1 || c.input(kPastLengths).shape(0) != g.batch)
    c.Fail("past_seqlens must be [batch_size]");
  if (table.ndim() != 2 || table.shape(0) != g.batch || table.shape(1) == 0)
    c.Fail("block_table must be [batch_size, max_blocks_per_sequence]");
  g.blocks_per_seq = table.shape(1);
  return g;
}

/** Q [T, H, D], K and V [T, Hkv, D] from the separate or packed inputs. */
struct TokenHeads {
  mx::array q, k, v;
};

TokenHeads SplitQkv(const OpContext& c, const Geometry& g) {
  const mx::Stream s = c.stream;
  const int T = g.tokens, D = g.head_size, qh = g.heads * D, kvh = g.kv_heads * D;
  if (c.has_input(kKey)) {
    const mx::array &k = c.input(kKey), &v = c.input(kValue);
    if (c.input(kQuery).shape(1) != qh || k.shape() != mx::Shape{T, kvh} || v.shape() != k.shape())
      c.Fail(
          "key/value must be [tokens, kv_num_heads * head_size] and query [tokens, num_heads * head_size]");
    return {mx::reshape(c.input(kQuery), {T, g.heads, D}, s), mx::reshape(k, {T, g.kv_heads, D}, s),
            mx::reshape(v, {T, g.kv_heads, D}, s)};
  }
  const mx::array& all = c.input(kQuery);
  if (all.shape(1) != qh + 2 * kvh)
    c.Fail("packed QKV must be [tokens, (num_heads + 2 kv_num_heads) * head_size]");
  auto part = [&](int from, int to, int heads) {
    return mx::reshape(mx::slice(all, {0, from}, {T, to}, s), {T, heads, D}, s);
  };
  return {part(0, qh, g.heads), part(qh, qh + kvh, g.kv_heads), part(qh + kvh, qh + 2 * kvh, g.kv_heads)};
}

TokenPlaces PlacesOf(const OpContext& c, const Geometry& g) {
  const mx::Stream s = c.stream;
  const mx::array &cum = c.input(kCumulative), &past = c.input(kPastLengths);
  const mx::array ends = mx::reshape(mx::slice(cum, {1}, {g.batch + 1}, s), {1, g.batch}, s);
  const mx::array t = mx::arange(g.tokens, mx::int32, s);
  mx::array seq = mx::sum(mx::greater_equal(mx::reshape(t, {g.tokens, 1}, s), ends, s), 1, false, s);
  seq = mx::minimum(mx::astype(seq, mx::int32, s), mx::array(g.batch - 1, mx::int32), s);
  const mx::array row = mx::subtract(t, mx::take(cum, seq, 0, s), s);
  return {seq, row, mx::add(mx::take(past, seq, 0, s), row, s)};
}

/** The run fails where ORT's kernel rejects the lengths (paged_attention_helper.h). */
void RequireLengths(const OpContext& c, const Geometry& g) {
  const mx::Stream s = c.stream;
  const mx::array &cum = c.input(kCumulative), &past = c.input(kPastLengths);
  const mx::array lo = mx::slice(cum, {0}, {g.batch}, s), hi = mx::slice(cum, {1}, {g.batch + 1}, s);
  const mx::array len = mx::subtract(hi, lo, s);
  mx::array ok = mx::logical_and(mx::equal(mx::take(cum, 0, s), mx::array(0, mx::int32), s),
                                 mx::equal(mx::take(cum, g.batch, s), mx::array(g.tokens, mx::int32), s), s);
  ok = mx::logical_and(ok, mx::all(mx::greater_equal(len, mx::array(0, mx::int32), s), s), s);
  ok = mx::logical_and(ok, mx::all(mx::greater_equal(past, mx::array(0, mx::int32), s), s), s);
  const mx::array fits = mx::less_equal(mx::add(past, len, s), mx::array(g.capacity(), mx::int32), s);
  c.Require(mx::logical_and(ok, mx::all(fits, s), s),
            "cumulative_sequence_length must run from 0 to the token count without decreasing, and "
            "past_seqlens + new tokens must fit max_blocks_per_sequence * block_size");
}

/** x [T, heads, D] RMS-normalised over D with `weight` in float32, rounded to x's type. */
mx::array Normalize(const OpContext& c, const mx::array& x, size_t weight) {
  const mx::Stream s = c.stream;
  const mx::array& w = c.input(weight);
  if (w.ndim() != 1 || w.shape(0) != x.shape(2)) c.Fail("q_norm_weight/k_norm_weight must be [head_size]");
  const mx::array xf = mx::astype(x, mx::float32, s);
  const mx::array mean = mx::mean(mx::square(xf, s), std::vector<int>{2}, true, s);
  const float eps = c.node.AttrFloat("qk_norm_epsilon", 1e-6f);
  const mx::array inv = mx::rsqrt(mx::add(mean, mx::array(eps), s), s);
  return mx::astype(mx::multiply(mx::multiply(xf, inv, s), mx::astype(w, mx::float32, s), s), x.dtype(), s);
}

/** x [T, heads, D] rotated at the tokens' positions. */
mx::array Rotate(const OpContext& c, const mx::array& x, const mx::array& position) {
  const mx::Stream s = c.stream;
  const mx::array &cos_cache = c.input(kCos), &sin_cache = c.input(kSin);
  if (cos_cache.ndim() != 2 || cos_cache.shape() != sin_cache.shape() || cos_cache.shape(0) == 0)
    c.Fail("cos_cache/sin_cache must be [max_position, rotary_dim / 2]");
  const int rot = 2 * cos_cache.shape(1), T = x.shape(0);
  if (rot == 0 || rot > x.shape(2)) c.Fail("rotary_dim must be in [2, head_size]");
  // MLX's gather does not check bounds (ORT reads past the cache): clamp.
  const mx::array pos =
      mx::clip(position, mx::array(0, mx::int32), mx::array(cos_cache.shape(0) - 1, mx::int32), s);
  auto rows = [&](const mx::array& cache) {
    return mx::reshape(mx::astype(mx::take(cache, pos, 0, s), mx::float32, s), {T, 1, 1, rot / 2}, s);
  };
  const mx::array x4 = mx::reshape(x, {T, x.shape(1), 1, x.shape(2)}, s);
  const bool interleaved = c.node.AttrInt("rotary_interleaved", 0) == 1;
  return mx::reshape(ApplyRotary(x4, rows(cos_cache), rows(sin_cache), rot, interleaved, s), x.shape(), s);
}

/** softmax(scale Q K^T (softcapped, masked), head_sink an extra logit) V, float32. q [N, H, S, D],
 *  k/v [N, Hkv, L, D], `position` [N, 1, S, 1] each query row's position, `mapped` [N, 1, 1, L]. */
mx::array Attend(const OpContext& c, const mx::array& q, const mx::array& k, const mx::array& v,
                 const mx::array& position, const mx::array& mapped) {
  const mx::Stream s = c.stream;
  const Node& n = c.node;
  const int N = q.shape(0), heads = q.shape(1), S = q.shape(2), L = k.shape(2), groups = heads / k.shape(1);
  const float scale_attr = n.AttrFloat("scale", 0.f);
  const float scale = scale_attr == 0.f ? 1.f / std::sqrt(static_cast<float>(q.shape(3))) : scale_attr;
  mx::array scores = GroupedMatmul(mx::multiply(q, mx::array(scale), s), mx::swapaxes(k, 2, 3, s), groups, s);
  if (const float softcap = n.AttrFloat("softcap", 0.f); softcap > 0.f) {
    const mx::array cap(softcap);
    scores = mx::multiply(mx::tanh(mx::divide(scores, cap, s), s), cap, s);
  }
  const mx::array j = mx::reshape(mx::arange(L, mx::int32, s), {1, 1, 1, L}, s);
  mx::array allowed = mx::logical_and(mapped, mx::less_equal(j, position, s), s);
  if (const int64_t window = n.AttrInt("local_window_size", -1); window > 0)
    allowed = mx::logical_and(
        allowed, mx::greater(j, mx::subtract(position, mx::array(static_cast<int>(window), mx::int32), s), s),
        s);
  scores = mx::where(allowed, scores, mx::array(-INFINITY), s);
  const bool sink = c.has_input(kHeadSink);
  if (sink) {
    const mx::array& h = c.input(kHeadSink);
    if (h.ndim() != 1 || h.shape(0) != heads) c.Fail("head_sink must be [num_heads]");
    const mx::array col = mx::reshape(mx::astype(h, mx::float32, s), {1, heads, 1, 1}, s);
    scores = mx::concatenate({mx::broadcast_to(col, {N, heads, S, 1}, s), scores}, 3, s);
  }
  mx::array p = mx::softmax(scores, std::vector<int>{3}, true, s);
  if (sink) p = mx::slice(p, {0, 0, 0, 1}, {N, heads, S, L + 1}, s);
  const mx::array y = GroupedMatmul(p, v, groups, s);
  return mx::where(mx::any(allowed, std::vector<int>{3}, true, s), y, mx::array(0.f), s);
}

/** Attention per token: each token's own sequence gathered ([T, L] keys), [T, H, D] float32. */
mx::array AttendPerToken(const OpContext& c, const Geometry& g, const TokenHeads& x, const TokenPlaces& at,
                         const mx::array& writers) {
  const mx::Stream s = c.stream;
  const int T = g.tokens, L = g.capacity();
  auto [slots, mapped] = SequenceSlots(c, g);
  const mx::array token_slots = mx::take(slots, at.seq, 0, s);
  const mx::array token_mapped = mx::reshape(mx::take(mapped, at.seq, 0, s), {T, 1, 1, L}, s);
  const mx::array qf = mx::astype(mx::reshape(x.q, {T, g.heads, 1, g.head_size}, s), mx::float32, s);
  const mx::array y = Attend(c, qf, ReadCache(c, g, kKeyCache, x.k, writers, token_slots),
                             ReadCache(c, g, kValueCache, x.v, writers, token_slots),
                             mx::reshape(at.position, {T, 1, 1, 1}, s), token_mapped);
  return mx::reshape(y, {T, g.heads, g.head_size}, s);
}

/** Attention per sequence: each sequence's tokens padded to T rows ([B, T, L] scores), [T, H, D]. */
mx::array AttendPerSequence(const OpContext& c, const Geometry& g, const TokenHeads& x, const TokenPlaces& at,
                            const mx::array& writers) {
  const mx::Stream s = c.stream;
  const int T = g.tokens, B = g.batch, L = g.capacity();
  auto [slots, mapped] = SequenceSlots(c, g);
  const mx::array cum = mx::reshape(mx::slice(c.input(kCumulative), {0}, {B}, s), {B, 1}, s);
  const mx::array r = mx::reshape(mx::arange(T, mx::int32, s), {1, T}, s);
  const mx::array token =
      mx::clip(mx::add(cum, r, s), mx::array(0, mx::int32), mx::array(T - 1, mx::int32), s);
  const mx::array qp =
      mx::reshape(mx::take(x.q, mx::reshape(token, {-1}, s), 0, s), {B, T, g.heads, g.head_size}, s);
  const mx::array qf = mx::astype(mx::transpose(qp, {0, 2, 1, 3}, s), mx::float32, s);
  // Rows past a sequence's new tokens get position -1: they attend nothing and are not read back.
  const mx::array len =
      mx::subtract(mx::reshape(mx::slice(c.input(kCumulative), {1}, {B + 1}, s), {B, 1}, s), cum, s);
  const mx::array past = mx::reshape(c.input(kPastLengths), {B, 1}, s);
  const mx::array position = mx::where(mx::less(r, len, s), mx::add(past, r, s), mx::array(-1, mx::int32), s);
  const mx::array y = Attend(c, qf, ReadCache(c, g, kKeyCache, x.k, writers, slots),
                             ReadCache(c, g, kValueCache, x.v, writers, slots),
                             mx::reshape(position, {B, 1, T, 1}, s), mx::reshape(mapped, {B, 1, 1, L}, s));
  const mx::array rows = mx::reshape(mx::transpose(y, {0, 2, 1, 3}, s), {B * T, g.heads, g.head_size}, s);
  return mx::take(rows, mx::add(mx::multiply(at.seq, mx::array(T, mx::int32), s), at.row, s), 0, s);
}

std::vector<mx::array> TranslatePagedAttention(const OpContext& c) {
  const mx::Stream s = c.stream;
  const Geometry g = GeometryOf(c);
  const mx::Dtype t = c.input(kQuery).dtype();
  auto outputs = [&](std::vector<mx::array> all) {  // the node may leave the cache outputs out
    all.resize(std::min(all.size(), c.num_outputs()), all[0]);
    return all;
  };
  if (g.tokens == 0)
    return outputs({mx::zeros({0, g.heads * g.head_size}, t, s), c.input(kKeyCache), c.input(kValueCache)});
  auto [q, k, v] = SplitQkv(c, g);
  const TokenPlaces at = PlacesOf(c, g);
  RequireLengths(c, g);
  if (c.has_input(kQNorm)) {
    q = Normalize(c, q, kQNorm);
    k = Normalize(c, k, kKNorm);
  }
  if (c.node.AttrInt("do_rotary", 0) == 1) {
    q = Rotate(c, q, at.position);
    k = Rotate(c, k, at.position);
  }
  const mx::array slots = WriteSlots(c, g, at);
  const mx::array writers = Writers(c, g, slots);
  const TokenHeads x{q, k, v};
  // Both layouts are exact; take the one with less to gather and score (elements, float32).
  const double L = g.capacity(), kv = 2.0 * g.kv_heads * g.head_size;
  const double per_token = g.tokens * L * (kv + g.heads);
  const double per_sequence = g.batch * L * (kv + g.heads * static_cast<double>(g.tokens));
  const mx::array y = per_token <= per_sequence ? AttendPerToken(c, g, x, at, writers)
                                                : AttendPerSequence(c, g, x, at, writers);
  std::vector<mx::array> outs = {mx::astype(mx::reshape(y, {g.tokens, g.heads * g.head_size}, s), t, s)};
  if (c.num_outputs() > 1) outs.push_back(CacheOutput(c, g, 1, kKeyCache, k, writers, slots));
  if (c.num_outputs() > 2) outs.push_back(CacheOutput(c, g, 2, kValueCache, v, writers, slots));
  return outs;
}

}  // namespace
}  // namespace paged

void RegisterPagedAttentionOps(OpRegistry& r) {
  r.Add(
      {"com.microsoft", "PagedAttention", 1, 1, paged::ClaimPagedAttention, paged::TranslatePagedAttention});
}

}  // namespace mlx_ep
