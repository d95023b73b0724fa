// Shared by the MatMul family files (matmul.cc, matmul_contrib.cc).
#pragma once

#include <functional>

#include "ops/op.h"

namespace mlx_ep {

/** A product of a: [..., M, K] and b: [..., K, N] (ranks >= 2, batch dims broadcast). */
using MatmulProduct = std::function<mx::array(const mx::array& a, const mx::array& b)>;

/** mx::matmul(a, b), without the Flatten and Unflatten MLX puts around an N-D `a` times a 2-D `b`
 *  where that is free: `b` is broadcast to a's batch dims instead (a view) when they are all 1 (a
 *  decode step's [1, 1, K]: on an initializer ConstantFolder evaluates the broadcast once, so a run
 *  has one primitive, the Matmul) or on a GPU, whose Matmul folds a broadcast `b`'s batch into M
 *  itself (mlx/backend/cuda/matmul.cpp; one Broadcast a run where Flatten and Unflatten were two).
 *  On MLX's CPU device a batch of several stays flattened: its Matmul would run one GEMM per
 *  batch entry. */
mx::array FlatFreeMatmul(const mx::array& a, const mx::array& b, mx::Stream s);

/** True when every dim of `a` before its last two is 1 (none for a 2-D `a`): its product is the
 *  one [M, K] GEMM, whatever its rank. */
bool HasUnitBatch(const mx::array& a);

/** ONNX MatMul's (numpy's) shape rules around `product`: 1-D operands are promoted (a: [K] ->
 *  [1, K], b: [K] -> [K, 1]) and the added dim dropped again; an empty result or an empty inner
 *  dim gives zeros of a's dtype without calling `product`. Fails on rank 0 or unequal inner dims. */
mx::array NumpyMatmul(const OpContext& c, mx::array a, mx::array b, const MatmulProduct& product);

}  // namespace mlx_ep
