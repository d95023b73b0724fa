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

bool BroadcastsTo(const mx::array& mask, const mx::array& x) {
  if (mask.dtype() != x.dtype() || mask.ndim() > x.ndim()) return false;
  const size_t pad = x.ndim() - mask.ndim();
  for (size_t d = 0; d < mask.ndim(); ++d)
    if (mask.shape(d) != 1 && mask.shape(d) != x.shape(pad + d)) return false;
  return true;
}

}  // namespace

std::vector<mx::array> ScoreInputs(const mx::array& x, ScoreTerms& terms) {
  if (IsPrimitive(x, "Add") && x.inputs().size() == 2) {
    int best = -1;  // the side that is the scores: a scaled one first
    std::optional<std::pair<std::vector<mx::array>, ScoreTerms::Scale>> scaled[2];
    for (int side : {0, 1}) {
      const mx::array& s = x.inputs()[side];
      if (s.shape() != x.shape() || s.dtype() != x.dtype() || !BroadcastsTo(Unbroadcast(x.inputs()[1 - side]), x))
        continue;
      scaled[side] = Scaled(s);
      if (best < 0 || (scaled[side] && !scaled[best])) best = side;
    }
    if (best >= 0) {
      terms.mask = true;
      const mx::array mask = Unbroadcast(x.inputs()[1 - best]);
      if (scaled[best]) {
        terms.scale = scaled[best]->second;
        return {scaled[best]->first[0], scaled[best]->first[1], mask};
      }
      return {x.inputs()[best], mask};
    }
  }
  if (auto scaled = Scaled(x)) {
    terms.scale = scaled->second;
    return scaled->first;
  }
  return {x};
}

}  // namespace mlx_ep
