// The pullbacks of the pkg.onnax AttentionVJP contract (attention_vjp_internal.h), in float32 on
// the [B, H, S, D] layout:
//
//  - FusedPullback: mx::vjp of MLX's fused scaled_dot_product_attention. MLX's "causal" mode is
//    aligned bottom-right, ONNX's top-left, so it is used only when Sq == Sk and there is no mask;
//    otherwise the top-left triangle is folded into an array mask. A short mask is padded (false /
//    -inf) to the key length. SDPA masks a boolean with the lowest finite float (a fully masked
//    row becomes uniform) and an all -inf additive row is NaN: such rows get a harmless mask and
//    their output is zeroed afterwards, so their cotangent never reaches SDPA's backward.
//  - GemmPullback: the score matrix recomputed from Q and K with matmuls, P = softmax, then
//    dV = P^T G, dP = G V^T, dS = P * (dP - rowsum(G * Y)), dQ = scale dS K, dK = scale dS^T Q.
//    Grouped-query heads are folded into the query axis ([B, Hk, Gr * Sq, ...]) so K and V are
//    never repeated. Tiled over query blocks when the whole score matrix is over budget: each
//    block's dQ rows are exact, and dK / dV are sums over the blocks.
#include <cmath>

#include "ops/attention_vjp_internal.h"

namespace mlx_ep::attention_vjp {
namespace {

/** The mask padded in its last axis to the key length (false / -inf), unless it broadcasts. */
mx::array PadToKeyLength(const mx::array& mask, int key_len, MaskKind kind, mx::Stream s) {
  const int last = mask.shape(-1);
  if (last == 1 || last >= key_len) return mask;
  std::vector<std::pair<int, int>> widths(mask.ndim(), {0, 0});
  widths.back() = {0, key_len - last};
  const mx::array fill = kind == MaskKind::kBool ? mx::array(false) : mx::array(-INFINITY);
  return mx::pad(mask, widths, fill, "constant", s);
}

/** [Sq, Sk] booleans: query i attends key j iff j <= i (ONNX's top-left causal alignment). */
mx::array TopLeftCausal(int query_len, int key_len, mx::Stream s) {
  const mx::array i = mx::reshape(mx::arange(query_len, mx::int32, s), {query_len, 1}, s);
  const mx::array j = mx::reshape(mx::arange(key_len, mx::int32, s), {1, key_len}, s);
  return mx::less_equal(j, i, s);
}

/** The mask argument of fused SDPA and the rows that attend anything (nullopt: all do). */
struct FusedMask {
  std::string mode;
  std::optional<mx::array> mask;
  std::optional<mx::array> valid;  ///< [..., Sq, 1] booleans
};

FusedMask MakeFusedMask(const Contract& c, const HeadTensors& t, mx::Stream s) {
  const int query_len = t.q.shape(2), key_len = t.k.shape(2);
  const bool additive = c.mask == MaskKind::kAdditive;
  std::optional<mx::array> mask;
  if (c.mask != MaskKind::kNone) mask = PadToKeyLength(*t.mask, key_len, c.mask, s);
  if (c.causal) {
    if (!mask && query_len == key_len) return {"causal", std::nullopt, std::nullopt};
    const mx::array causal = TopLeftCausal(query_len, key_len, s);
    if (!mask)
      mask = causal;
    else
      mask = additive ? mx::where(causal, *mask, mx::array(-INFINITY), s) : mx::logical_and(*mask, causal, s);
  }
  if (!mask) return {"", std::nullopt, std::nullopt};
  const mx::array allowed = additive ? mx::not_equal(*mask, mx::array(-INFINITY), s) : *mask;
  const mx::array valid = mx::any(allowed, -1, true, s);
  // A row that attends nothing gets a mask SDPA handles finitely; its output is zeroed later.
  const mx::array fill = additive ? mx::array(0.f) : mx::array(true);
  return {"array", mx::where(valid, *mask, fill, s), valid};
}

mx::array Sdpa(const Contract& c, const FusedMask& m, const mx::array& q, const mx::array& k,
               const mx::array& v, mx::Stream s) {
  mx::array y = mx::fast::scaled_dot_product_attention(q, k, v, c.scale, m.mode, m.mask, {}, false, s);
  if (m.valid) y = mx::where(*m.valid, y, mx::array(0.f), s);
  return y;
}

/** A mask broadcastable to [B, Hq, Sq, Sk] as one broadcastable to [B, Hk, Gr, Sq, Sk]. */
mx::array ToGroups(const mx::array& mask, int kv_heads, int groups, mx::Stream s) {
  mx::Shape shape = mask.shape();
  while (shape.size() < 4) shape.insert(shape.begin(), 1);
  const bool per_head = shape[1] != 1;
  return mx::reshape(mask, {shape[0], per_head ? kv_heads : 1, per_head ? groups : 1, shape[2], shape[3]}, s);
}

/** Where the scores are masked, in the grouped layout [B, Hk, Gr, Sq, Sk] (each may be absent). */
struct ScoreMask {
  std::optional<mx::array> allowed;  ///< booleans: the bool mask and the causal triangle
  std::optional<mx::array> bias;     ///< the additive mask
  bool any() const { return allowed || bias; }
};

ScoreMask MakeScoreMask(const Contract& c, const HeadTensors& t, int groups, mx::Stream s) {
  const int query_len = t.q.shape(2), key_len = t.k.shape(2), kv_heads = t.k.shape(1);
  ScoreMask m;
  if (c.mask != MaskKind::kNone) {
    const mx::array mask = ToGroups(PadToKeyLength(*t.mask, key_len, c.mask, s), kv_heads, groups, s);
    if (c.mask == MaskKind::kBool)
      m.allowed = mask;
    else
      m.bias = mask;
  }
  if (c.causal) {
    const mx::array causal =
        mx::reshape(TopLeftCausal(query_len, key_len, s), {1, 1, 1, query_len, key_len}, s);
    m.allowed = m.allowed ? mx::logical_and(*m.allowed, causal, s) : causal;
  }
  return m;
}

/** Rows [start, stop) of axis 3 (the query axis) of x, unless x broadcasts along it. */
mx::array QueryRows(const mx::array& x, int start, int stop, mx::Stream s) {
  if (x.shape(3) == 1) return x;
  mx::Shape begin(x.ndim(), 0), end = x.shape();
  begin[3] = start;
  end[3] = stop;
  return mx::slice(x, begin, end, s);
}

/** Softmax over the last axis where rows may be fully masked (-inf everywhere): those give 0. */
mx::array MaskedSoftmax(const mx::array& scores, mx::Stream s) {
  const mx::array row_max = mx::max(scores, -1, true, s);
  const mx::array valid = mx::greater(row_max, mx::array(-INFINITY), s);
  const mx::array e = mx::exp(mx::subtract(scores, mx::where(valid, row_max, mx::array(0.f), s), s), s);
  const mx::array sum = mx::sum(e, -1, true, s);
  return mx::divide(e, mx::where(valid, sum, mx::array(1.f), s), s);
}

struct Grads {
  mx::array dq, dk, dv;
};

/** The pullback of one block of queries: q, g, y [B, Hk, Gr, T, D], k, v [B, Hk, Sk, D]. */
Grads BlockPullback(const Contract& c, const mx::array& q, const mx::array& k, const mx::array& v,
                    const mx::array& g, const mx::array& y, const ScoreMask& m, mx::Stream s) {
  const mx::Shape grouped = q.shape();
  const int b = grouped[0], kv_heads = grouped[1], rows = grouped[2] * grouped[3], d = grouped[4];
  const int key_len = k.shape(2);
  const mx::array scale = mx::array(c.scale);
  const mx::array qf = mx::reshape(q, {b, kv_heads, rows, d}, s);
  const mx::array gf = mx::reshape(g, {b, kv_heads, rows, d}, s);
  const mx::array yf = mx::reshape(y, {b, kv_heads, rows, d}, s);
  mx::array scores = mx::multiply(mx::matmul(qf, mx::swapaxes(k, -1, -2, s), s), scale, s);
  mx::array p = scores;
  if (m.any()) {
    scores = mx::reshape(scores, {b, kv_heads, grouped[2], grouped[3], key_len}, s);
    if (m.bias) scores = mx::add(scores, *m.bias, s);
    if (m.allowed) scores = mx::where(*m.allowed, scores, mx::array(-INFINITY), s);
    p = mx::reshape(MaskedSoftmax(scores, s), {b, kv_heads, rows, key_len}, s);
  } else {
    p = mx::softmax(scores, -1, true, s);
  }
  const mx::array dv = mx::matmul(mx::swapaxes(p, -1, -2, s), gf, s);
  const mx::array dp = mx::matmul(gf, mx::swapaxes(v, -1, -2, s), s);
  const mx::array delta = mx::sum(mx::multiply(gf, yf, s), -1, true, s);
  const mx::array ds = mx::multiply(mx::multiply(p, mx::subtract(dp, delta, s), s), scale, s);
  const mx::array dq = mx::reshape(mx::matmul(ds, k, s), grouped, s);
  const mx::array dk = mx::matmul(mx::swapaxes(ds, -1, -2, s), qf, s);
  return {dq, dk, dv};
}

}  // namespace

mx::array FusedForward(const Contract& c, const HeadTensors& t, mx::Stream s) {
  return Sdpa(c, MakeFusedMask(c, t, s), t.q, t.k, t.v, s);
}

std::vector<mx::array> FusedPullback(const Contract& c, const HeadTensors& t, mx::Stream s) {
  // The mask is made outside the differentiated function: no gradient flows into it.
  const FusedMask m = MakeFusedMask(c, t, s);
  auto forward = [&](const std::vector<mx::array>& primals) {
    return std::vector<mx::array>{Sdpa(c, m, primals[0], primals[1], primals[2], s)};
  };
  return mx::vjp(forward, {t.q, t.k, t.v}, {t.g}).second;
}

std::vector<mx::array> GemmPullback(const Contract& c, const HeadTensors& t, int query_block, mx::Stream s) {
  const int b = t.q.shape(0), q_heads = t.q.shape(1), query_len = t.q.shape(2), d = t.q.shape(3);
  const int kv_heads = t.k.shape(1), groups = q_heads / kv_heads;
  const mx::Shape grouped = {b, kv_heads, groups, query_len, d};
  const mx::array q = mx::reshape(t.q, grouped, s), g = mx::reshape(t.g, grouped, s);
  const mx::array y = mx::reshape(*t.y, grouped, s);
  const ScoreMask mask = MakeScoreMask(c, t, groups, s);
  const int block = std::max(1, std::min(query_block, query_len));
  std::vector<mx::array> dq;
  std::optional<mx::array> dk, dv;
  for (int start = 0; start < query_len; start += block) {
    const int stop = std::min(start + block, query_len);
    ScoreMask rows;
    if (mask.allowed) rows.allowed = QueryRows(*mask.allowed, start, stop, s);
    if (mask.bias) rows.bias = QueryRows(*mask.bias, start, stop, s);
    Grads part = BlockPullback(c, QueryRows(q, start, stop, s), t.k, t.v, QueryRows(g, start, stop, s),
                               QueryRows(y, start, stop, s), rows, s);
    dq.push_back(part.dq);
    dk = dk ? mx::add(*dk, part.dk, s) : part.dk;
    dv = dv ? mx::add(*dv, part.dv, s) : part.dv;
  }
  const mx::array dq_all = dq.size() == 1 ? dq[0] : mx::concatenate(dq, 3, s);
  return {mx::reshape(dq_all, t.q.shape(), s), *dk, *dv};
}

}  // namespace mlx_ep::attention_vjp
