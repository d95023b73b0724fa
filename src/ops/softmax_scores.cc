// Attention's scores under a softmax (softmax_scores.h).
#include "ops/softmax_scores.h"

#include <optional>
#include <utility>

#include "ops/primitive_name.h"

namespace mlx_ep {
namespace {

/** `a` without the Broadcast primitives MLX's binary ops put around an operand of another shape. */
mx::array Unbroadcast(mx::array a) {
  while (IsPrimitive(a, "Broadcast") && a.inputs().size() == 1) a = mx::array(a.inputs()[0]);
  return a;
}

/** `a` widened from `t` (an AsType of a `t` array to float32): that array. */
std::optional<mx::array> WidenedFrom(const mx::array& a, mx::Dtype t) {
  if (!IsPrimitive(a, "AsType") || a.inputs().size() != 1 || a.dtype() != mx::float32 ||
      a.inputs()[0].dtype() != t)
    return std::nullopt;
  return a.inputs()[0];
}

/** For `a` = s / k or s * k in a's type (k one value, s of a's shape), or a float16/bfloat16 s / k
 *  computed in float32 and rounded once to a's type: {s, k} and the scale. */
std::optional<std::pair<std::vector<mx::array>, ScoreTerms::Scale>> Scaled(const mx::array& a) {
  const mx::Dtype t = a.dtype();
  mx::array op = a;
  bool widened = false;
  if (IsPrimitive(a, "AsType") && a.inputs().size() == 1 && t != mx::float32 &&
      IsPrimitive(a.inputs()[0], "Divide") && a.inputs()[0].dtype() == mx::float32) {
    op = a.inputs()[0];
    widened = true;
  }
  const bool divide = IsPrimitive(op, "Divide");
  if ((!divide && !IsPrimitive(op, "Multiply")) || op.inputs().size() != 2) return std::nullopt;
  for (int side : {0, 1}) {
    if (divide && side == 1) break;  // k / s is not a scaling
    std::optional<mx::array> s = op.inputs()[side];
    std::optional<mx::array> k = Unbroadcast(op.inputs()[1 - side]);
    if (widened) {
      s = WidenedFrom(*s, t);
      k = k ? WidenedFrom(*k, t) : std::nullopt;
      if (!s || !k) continue;
    }
    if (s->shape() == a.shape() && s->dtype() == t && k->size() == 1 && k->dtype() == t)
      return std::make_pair(std::vector<mx::array>{*s, *k},
                            divide ? ScoreTerms::Scale::kDivide : ScoreTerms::Scale::kMultiply);
  }
  return std::nullopt;
}

bool BroadcastsTo(const mx::array& mask, const mx::array& x, mx::Dtype dtype) {
  if (mask.dtype() != dtype || mask.ndim() > x.ndim()) return false;
  const size_t pad = x.ndim() - mask.ndim();
  for (size_t d = 0; d < mask.ndim(); ++d)
    if (mask.shape(d) != 1 && mask.shape(d) != x.shape(pad + d)) return false;
  return true;
}

/** The scores below the masks: s, s / k or s * k, or (`select`) where(cond, one of those, fill)
 *  with cond bool broadcast to y and fill one value. */
struct Inner {
  std::vector<mx::array> inputs;
  ScoreTerms terms;
};

Inner InnerScores(const mx::array& y, bool select) {
  Inner in;
  if (select && IsPrimitive(y, "Select") && y.inputs().size() == 3) {
    const mx::array& chosen = y.inputs()[1];
    const mx::array cond = Unbroadcast(y.inputs()[0]), fill = Unbroadcast(y.inputs()[2]);
    if (chosen.shape() == y.shape() && chosen.dtype() == y.dtype() && BroadcastsTo(cond, y, mx::bool_) &&
        fill.size() == 1 && fill.dtype() == y.dtype()) {
      in = InnerScores(chosen, false);
      in.terms.select = true;
      in.inputs.push_back(cond);
      in.inputs.push_back(fill);
      return in;
    }
  }
  if (auto scaled = Scaled(y)) {
    in.terms.scale = scaled->second;
    in.inputs = scaled->first;
    return in;
  }
  in.inputs = {y};
  return in;
}

/** For x = y + mask (either order; the mask broadcast to x): {y, mask as it was before MLX broadcast
 *  it}, y the side whose own terms are fused where both could be (with `select_and_masks`, a
 *  select or a masked sum counts as fused too). */
std::optional<std::pair<mx::array, mx::array>> Masked(const mx::array& x, bool select_and_masks) {
  if (!IsPrimitive(x, "Add") || x.inputs().size() != 2) return std::nullopt;
  int best = -1;
  bool best_fused = false;
  for (int side : {0, 1}) {
    const mx::array& s = x.inputs()[side];
    if (s.shape() != x.shape() || s.dtype() != x.dtype() ||
        !BroadcastsTo(Unbroadcast(x.inputs()[1 - side]), x, x.dtype()))
      continue;
    const bool fused =
        InnerScores(s, select_and_masks).terms.fused() || (select_and_masks && Masked(s, false));
    if (best < 0 || (fused && !best_fused)) best = side, best_fused = fused;
  }
  if (best < 0) return std::nullopt;
  return std::make_pair(x.inputs()[best], Unbroadcast(x.inputs()[1 - best]));
}

}  // namespace

std::vector<mx::array> ScoreInputs(const mx::array& x, ScoreTerms& terms, bool select_and_masks) {
  std::vector<mx::array> masks;
  mx::array scores = x;
  if (auto outer = Masked(x, select_and_masks)) {
    scores = outer->first;
    masks.push_back(outer->second);
    if (select_and_masks) {
      if (auto inner = Masked(scores, false)) {
        scores = inner->first;
        masks.insert(masks.begin(), inner->second);  // added first
      }
    }
  }
  Inner in = InnerScores(scores, select_and_masks);
  terms = in.terms;
  terms.mask = !masks.empty();
  terms.mask2 = masks.size() == 2;
  if (!terms.fused()) return {x};
  in.inputs.insert(in.inputs.end(), masks.begin(), masks.end());
  return in.inputs;
}

}  // namespace mlx_ep
