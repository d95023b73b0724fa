// What a softmax row's input is made of in the trace: attention's scores, (s / k or s * k) + mask,
// which the EP's softmax primitives (softmax_cpu.cc on MLX's CPU device, softmax_cuda.cc on its
// CUDA backend) read in their own pass instead of evaluating those ops (a pass, or a kernel of
// MLX's with a broadcast mask, of their own).
#pragma once

#include <vector>

#include "mlx/array.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** The scores' terms: the input itself, or (s / k or s * k) + mask with k one value and the mask
 *  broadcast to s's shape, each step rounded to the row's type as the ops round it. The CPU's
 *  softmax (float32) also takes, where ScoreInputs is asked for them, a select between the scaled
 *  scores and one value (older GPT-2 exports' where(causal, s / k, min)) before the mask, and a
 *  second mask after it ((s / k + causal) + padding, newer ones'). */
struct ScoreTerms {
  enum class Scale { kNone, kDivide, kMultiply };
  Scale scale = Scale::kNone;
  bool select = false;  // where(cond, scaled scores, fill): cond broadcast to s, fill one value
  bool mask = false;
  bool mask2 = false;  // a second mask, added after the first
  bool fused() const { return scale != Scale::kNone || select || mask; }
  bool operator==(const ScoreTerms&) const = default;
};

/** The kernels' SCALE constant for `scale` (softmax_cuda.cc, attention_heads_cuda.cc): 0 none,
 *  1 divide, 2 multiply. */
inline int ScaleConstant(ScoreTerms::Scale scale) {
  return scale == ScoreTerms::Scale::kDivide ? 1 : scale == ScoreTerms::Scale::kMultiply ? 2 : 0;
}

/** For `x` (a float row type T): its scores' arrays, s then k (scaled) then, with `select_and_masks`,
 *  the select's condition and fill, then the mask and the second mask (added; each as it was
 *  before MLX broadcast it), when x's own primitives are those terms in T (an s / k of float16 or
 *  bfloat16 traced as float32 and rounded once, as arithmetic.cc divides them); else {x} with
 *  `terms` left empty. Without `select_and_masks` (the CUDA kernels) terms.select and terms.mask2
 *  stay false. */
std::vector<mx::array> ScoreInputs(const mx::array& x, ScoreTerms& terms, bool select_and_masks = false);

}  // namespace mlx_ep
