// Helpers of the reduction family shared with other families (normalization).
#pragma once

#include <vector>

#include "ops/op.h"

namespace mlx_ep {

/** Sum of `x` over `axes` (sorted, unique, non-negative). Large float reductions are summed in two
 *  stages (blocks of ~sqrt(n) values, then the block sums): MLX's CPU reduction accumulates one
 *  long chain, whose rounding error (~n * eps) is far above ORT's for n in the 10^4..10^6 range. */
mx::array AccurateSum(const mx::array& x, const std::vector<int>& axes, bool keepdims, mx::Stream s);

}  // namespace mlx_ep
