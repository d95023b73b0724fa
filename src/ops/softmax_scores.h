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
 *  broadcast to s's shape, each step rounded to the row's type as the ops round it. */
struct ScoreTerms {
  enum class Scale { kNone, kDivide, kMultiply };
  Scale scale = Scale::kNone;
  bool mask = false;
  bool fused() const { return scale != Scale::kNone || mask; }
  bool operator==(const ScoreTerms&) const = default;
};

/** The kernels' SCALE constant for `scale` (softmax_cuda.cc, attention_heads_cuda.cc): 0 none,
 *  1 divide, 2 multiply. */
inline int ScaleConstant(ScoreTerms::Scale scale) {
  return scale == ScoreTerms::Scale::kDivide ? 1 : scale == ScoreTerms::Scale::kMultiply ? 2 : 0;
}

/** For `x` (a float row type T): its scores' arrays, s then k (scaled) then the mask (added; as it
 *  was before MLX broadcast it), when x's own primitives are those terms in T (an s / k of
 *  float16 or bfloat16 traced as float32 and rounded once, as arithmetic.cc divides them); else
 *  {x} with `terms` left empty. */
std::vector<mx::array> ScoreInputs(const mx::array& x, ScoreTerms& terms);

}  // namespace mlx_ep
