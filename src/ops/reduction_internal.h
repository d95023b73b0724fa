// Helpers of the reduction family shared with other families (normalization).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace mlx_ep {

/** Sum of `x` over `axes` (sorted, unique, non-negative). Large float reductions are summed in two
 *  stages (blocks of ~sqrt(n) values, then the block sums): MLX's CPU reduction accumulates one
 *  long chain, whose rounding error (~n * eps) is far above ORT's for n in the 10^4..10^6 range. */
mx::array AccurateSum(const mx::array& x, const std::vector<int>& axes, bool keepdims, mx::Stream s);

/** AccurateSum's stages: a sum of at least this many values runs in blocks of TwoStageBlock(n). */
inline constexpr int64_t kTwoStageSumFrom = 256;

/** The block length of a two-stage sum of `n` values: ~sqrt(n), a multiple of 32. */
int64_t TwoStageBlock(int64_t n);

}  // namespace mlx_ep
