// Float32 sums on MLX's CPU device as one primitive of the EP's (reduction_cpu.cc).
#pragma once

#include <optional>
#include <vector>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** AccurateSum's two-stage sum of float32 `x` over `axes` (sorted, unique, non-negative) with the
 *  reduced axes kept as 1s, as one primitive on CPU stream `s` (no transpose, pad or copy); nullopt
 *  where it does not apply (another device or dtype, axes that are not consecutive, no values, or
 *  ONNXRUNTIME_EP_MLX_REDUCE_CPU_KERNEL=0). */
std::optional<mx::array> AccurateSumOnCpu(const mx::array& x, const std::vector<int>& axes, mx::Stream s);

}  // namespace mlx_ep
