// Shared by the MatMul family files (matmul.cc, matmul_contrib.cc).
#pragma once

#include <functional>

#include "ops/op.h"

namespace mlx_ep {

/** A product of a: [..., M, K] and b: [..., K, N] (ranks >= 2, batch dims broadcast). */
using MatmulProduct = std::function<mx::array(const mx::array& a, const mx::array& b)>;

/** ONNX MatMul's (numpy's) shape rules around `product`: 1-D operands are promoted (a: [K] ->
 *  [1, K], b: [K] -> [K, 1]) and the added dim dropped again; an empty result or an empty inner
 *  dim gives zeros of a's dtype without calling `product`. Fails on rank 0 or unequal inner dims. */
mx::array NumpyMatmul(const OpContext& c, mx::array a, mx::array b, const MatmulProduct& product);

}  // namespace mlx_ep
