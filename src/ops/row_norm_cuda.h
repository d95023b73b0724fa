// One CUDA kernel for a normalization over the last axis (LayerNormalization, the simplified /
// RMS forms and ORT's Skip* variants) where MLX's fused forms take three: the widening cast (or
// the skip sum), mx::fast::layer_norm / rms_norm on float32, and the cast of the result. See
// row_norm_cuda.cc for the numerics.
#pragma once

#include <optional>
#include <utility>

#include "ops/op.h"

namespace mlx_ep {

/** What one row normalization reads: x [..., n] (rows: its leading dims); skip [..., n] whose
 *  rows (skip_rows) divide x's, added to row r as its row r % skip_rows; gamma, beta and bias
 *  of n values; any float types. */
struct RowNormInputs {
  const mx::array& x;
  const std::optional<mx::array>& skip;
  const mx::array& gamma;
  const std::optional<mx::array>& beta;
  const std::optional<mx::array>& bias;
  float eps;
  bool simplified;  // s / sqrt(mean(s^2) + eps), no mean subtracted
};

/** {y of x's shape and y_type, s = x + skip + bias of x's shape and sum_type (when want_sum, else
 *  a one-element placeholder)} through the kernel, or nullopt where it does not run: not a CUDA
 *  stream, too many rows for one launch, or its one-time self check failed on this device
 *  (logged once; the callers' MLX forms run instead). */
std::optional<std::pair<mx::array, mx::array>> RowNormKernel(const RowNormInputs& in, mx::Dtype y_type,
                                                             bool want_sum, mx::Dtype sum_type, mx::Stream s);

}  // namespace mlx_ep
