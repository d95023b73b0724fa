// Op family: RotaryEmbedding (ai.onnx 23, com.microsoft 1), rotary positional embeddings (RoPE).
//
//  - X is [batch, heads, seq, head_size] (4-D) or [batch, seq, heads * head_size] (3-D, with the
//    num_heads attribute). The first rotary_embedding_dim values of each head (all of them when the
//    attribute is 0) are rotated by the angles whose cosines/sines the caches hold; the rest pass.
//  - cos_cache/sin_cache are [max_position, rotary_dim / 2] gathered by position_ids [batch, seq],
//    or, without position_ids, already [batch, seq, rotary_dim / 2].
//  - interleaved=1 pairs (x[2i], x[2i+1]); interleaved=0 pairs (x[i], x[i + rotary_dim / 2]).
//  - float16/bfloat16 compute in float32 and round once.
//  - ORT errors on position ids outside [0, max_position); a compiled MLX graph cannot raise on
//    data and MLX's gather does not check bounds, so they are clamped (never read out of bounds)
//    and a runtime check (OpContext::Require) fails the run after evaluation, as ORT does.
//  - com.microsoft RotaryEmbedding-1 (ORT's contrib op): inputs (X, position_ids, cos_cache,
//    sin_cache); position_ids are int64 data, [batch, seq] or one value p (positions p + s); the
//    caches are always [max_position, rotary_dim / 2]. 3-D X without num_heads has heads of
//    2 * cos_cache.shape[1]. Declined: is_packed_batching, a scale other than 1.
#include "ops/attention_internal.h"
#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

Claim ClaimRotaryEmbedding(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  if (!v.has_input(1) || !v.has_input(2)) return Claim::No("cos_cache or sin_cache is missing");
  if (v.input_type(1) != t || v.input_type(2) != t)
    return Claim::No("cos_cache/sin_cache type differs from X");
  if (v.has_input(3) && v.input_type(3) != ElemType::kInt64) return Claim::No(TypeReason(v, 3));
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  const int64_t interleaved = v.node().AttrInt("interleaved", 0);
  if (interleaved != 0 && interleaved != 1)
    return Claim::No("attribute interleaved=" + std::to_string(interleaved) + " not supported");
  if (v.node().AttrInt("rotary_embedding_dim", 0) < 0) return Claim::No("rotary_embedding_dim is negative");
  const int64_t heads = v.node().AttrInt("num_heads", 0);
  if (heads < 0) return Claim::No("num_heads is negative");
  if (auto r = v.input_rank(0)) {
    if (*r != 3 && *r != 4) return Claim::No("X must have rank 3 or 4");
    if (*r == 3 && heads == 0) return Claim::No("3-D X needs the num_heads attribute");
  }
  return Claim::Yes();
}

/** The cos or sin values for every (batch, seq) position: [batch, seq, half] in float32. */
mx::array CacheRows(const OpContext& c, size_t i, int batch, int seq, int half) {
  const mx::Stream s = c.stream;
  mx::array cache = c.input(i);
  if (c.has_input(3)) {
    const mx::array& pos = c.input(3);
    if (cache.ndim() != 2 || cache.shape(0) == 0) c.Fail("caches must be [max_position, rotary_dim / 2]");
    if (pos.shape() != mx::Shape{batch, seq}) c.Fail("position_ids must be [batch, sequence]");
    c.Require(mx::logical_and(mx::greater_equal(pos, mx::array(0, pos.dtype()), s),
                              mx::less(pos, mx::array(cache.shape(0), pos.dtype()), s), s),
              "position_ids value out of range [0, max_position)");
    const mx::array ids =
        mx::clip(pos, mx::array(0, pos.dtype()), mx::array(cache.shape(0) - 1, pos.dtype()), s);
    cache = mx::take(cache, ids, 0, s);
  }
  if (cache.shape() != mx::Shape{batch, seq, half})
    c.Fail("caches must be [batch, sequence, rotary_dim / 2] (" + std::to_string(half) + ")");
  return mx::astype(cache, mx::float32, s);
}

std::vector<mx::array> TranslateRotaryEmbedding(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int heads_attr = static_cast<int>(c.node.AttrInt("num_heads", 0));
  const bool interleaved = c.node.AttrInt("interleaved", 0) != 0;
  if (x.ndim() != 3 && x.ndim() != 4) c.Fail("X must have rank 3 or 4");
  const bool three_d = x.ndim() == 3;
  const int batch = x.shape(0);
  const int seq = three_d ? x.shape(1) : x.shape(2);
  if (three_d && (heads_attr <= 0 || x.shape(2) % heads_attr != 0))
    c.Fail("the hidden size of 3-D X must be a multiple of num_heads");
  const int heads = three_d ? heads_attr : x.shape(1);
  const int head_size = three_d ? x.shape(2) / heads : x.shape(3);
  const int rot = c.node.AttrInt("rotary_embedding_dim", 0) == 0
                      ? head_size
                      : static_cast<int>(c.node.AttrInt("rotary_embedding_dim", 0));
  if (rot > head_size || rot % 2 != 0) c.Fail("rotary_embedding_dim must be even and at most head_size");
  const int half = rot / 2;

  // Work as [batch, seq, heads, head] (3-D) or [batch, heads, seq, head] (4-D); the caches are
  // [batch, seq, half] and gain a size-1 heads dim at the matching place.
  const mx::array xs = three_d ? mx::reshape(x, {batch, seq, heads, head_size}, s) : x;
  if (c.has_input(3) && c.input(3).shape() != mx::Shape{batch, seq})
    c.Fail("position_ids must be [batch, sequence]");  // checked for empty X too, as ORT does
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};
  const int heads_axis = three_d ? 2 : 1;
  const mx::array cos = mx::expand_dims(CacheRows(c, 1, batch, seq, half), heads_axis, s);
  const mx::array sin = mx::expand_dims(CacheRows(c, 2, batch, seq, half), heads_axis, s);

  const mx::array y = ApplyRotary(xs, cos, sin, rot, interleaved, s);
  return {mx::reshape(y, x.shape(), s)};
}

Claim ClaimContribRotaryEmbedding(const NodeView& v) {
  const Node& n = v.node();
  if (auto no = DeclineUnknownAttributes(
          n, {"num_heads", "rotary_embedding_dim", "interleaved", "scale", "is_packed_batching"}))
    return *no;
  if (n.AttrInt("is_packed_batching", 0) != 0)
    return Claim::No("is_packed_batching (ragged batches) not supported");
  if (n.AttrFloat("scale", 1.f) != 1.f) return Claim::No("scale other than 1 not supported");
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != ElemType::kInt64) return Claim::No(TypeReason(v, 1));
  if (v.input_type(2) != t || v.input_type(3) != t)
    return Claim::No("cos_cache/sin_cache type differs from input");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  const int64_t interleaved = n.AttrInt("interleaved", 0);
  if (interleaved != 0 && interleaved != 1) return Claim::No("interleaved=" + std::to_string(interleaved));
  if (n.AttrInt("rotary_embedding_dim", 0) < 0 || n.AttrInt("num_heads", 0) < 0)
    return Claim::No("negative rotary_embedding_dim/num_heads");
  const auto r = v.input_rank(0);
  if (!r || (*r != 3 && *r != 4)) return Claim::No("input must have rank 3 or 4");
  if (*r == 3 && n.AttrInt("rotary_embedding_dim", 0) > 0 && n.AttrInt("num_heads", 0) == 0)
    return Claim::No("3-D input with rotary_embedding_dim needs num_heads");
  return Claim::Yes();
}

std::vector<mx::array> TranslateContribRotaryEmbedding(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array &x = c.input(0), &cos_cache = c.input(2), &sin_cache = c.input(3);
  if (cos_cache.ndim() != 2 || cos_cache.shape() != sin_cache.shape() || cos_cache.shape(0) == 0)
    c.Fail("cos_cache/sin_cache must be [max_position, rotary_dim / 2]");
  const bool three_d = x.ndim() == 3;
  const int batch = x.shape(0), seq = three_d ? x.shape(1) : x.shape(2);
  const int heads_attr = static_cast<int>(c.node.AttrInt("num_heads", 0));
  const int heads = !three_d         ? x.shape(1)
                    : heads_attr > 0 ? heads_attr
                                     : x.shape(2) / (2 * cos_cache.shape(1));
  if (heads <= 0 || (three_d && x.shape(2) % heads != 0))
    c.Fail("the hidden size is not a multiple of the heads");
  const int head_size = three_d ? x.shape(2) / heads : x.shape(3);
  const int64_t rot_attr = c.node.AttrInt("rotary_embedding_dim", 0);
  const int rot = rot_attr > 0 ? static_cast<int>(rot_attr) : head_size;
  if (rot > head_size || rot % 2 != 0 || cos_cache.shape(1) != rot / 2)
    c.Fail("cos_cache must be [max_position, rotary_dim / 2] with an even rotary_dim <= head_size");
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};

  mx::array pos = c.input(1);
  if (pos.size() == 1)  // one start position: p + s for every batch entry
    pos = mx::add(mx::reshape(pos, {1, 1}, s), mx::reshape(mx::arange(seq, pos.dtype(), s), {1, seq}, s), s);
  else if (pos.shape() != mx::Shape{batch, seq})
    c.Fail("position_ids must be [batch, sequence] or hold one value");
  pos = mx::broadcast_to(
      mx::clip(pos, mx::array(0, pos.dtype()), mx::array(cos_cache.shape(0) - 1, pos.dtype()), s),
      {batch, seq}, s);
  const int heads_axis = three_d ? 2 : 1;
  auto rows = [&](const mx::array& cache) {
    return mx::expand_dims(mx::astype(mx::take(cache, pos, 0, s), mx::float32, s), heads_axis, s);
  };
  const mx::array xs = three_d ? mx::reshape(x, {batch, seq, heads, head_size}, s) : x;
  const mx::array y =
      ApplyRotary(xs, rows(cos_cache), rows(sin_cache), rot, c.node.AttrInt("interleaved", 0) == 1, s);
  return {mx::reshape(y, x.shape(), s)};
}

}  // namespace

void RegisterRotaryEmbeddingOps(OpRegistry& r) {
  r.Add({"", "RotaryEmbedding", 23, 23, ClaimRotaryEmbedding, TranslateRotaryEmbedding});
  r.Add({"com.microsoft", "RotaryEmbedding", 1, 1, ClaimContribRotaryEmbedding,
         TranslateContribRotaryEmbedding});
}

}  // namespace mlx_ep
