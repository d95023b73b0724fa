// Row normalizations (LayerNormalization, RMSNormalization and ORT's contrib forms) on MLX's CPU
// device as one primitive of the EP's (normalization_cpu.cc), where the composed form is ~8 MLX
// primitives a norm (the accurate two-stage sums, the refined mean, the elementwise tail): 16 of
// a Qwen2-0.5B decode step's ~32 a layer.
#pragma once

#include <optional>

#include "ops/op.h"

namespace mlx_ep {

/** x [..., n] (float32) normalized over its last axis, float32 of x's shape: simplified, x / sqrt(mean(x^2) +
 * eps) * w; else (x - mean) / sqrt(var + eps) * w (+ b). The statistics accumulate in float64 (closer to the
 * exact values than ORT's float32 sums, so within its own error of ORT), the row's values in float32 in ORT's
 * order. w and b are [n] float32. nullopt off MLX's CPU device or with ONNXRUNTIME_EP_MLX_NORM_CPU_KERNEL=0
 * (the composed form). */
std::optional<mx::array> RowNormOnCpu(const mx::array& x, const mx::array& w,
                                      const std::optional<mx::array>& b, float eps, bool simplified,
                                      mx::Stream s);

}  // namespace mlx_ep
