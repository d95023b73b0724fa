// Declarations shared by the files of the indexing op family (ops/scatter_gather_nd.cc, ops/one_hot.cc).
#pragma once

#include "ops/op.h"
#include "ops/registry.h"

namespace mlx_ep {

/** OneHot (ops/one_hot.cc). */
void RegisterOneHotOps(OpRegistry& r);

namespace indexing {

/** Integer indices into a dim of size n > 0: negative ones count from the end, and all of them are
 *  clamped into [0, n-1]. ORT errors on indices outside [-n, n-1]; a compiled MLX graph cannot raise
 *  on data and MLX's gather/scatter do not check bounds, so clamping keeps every access in bounds. */
inline mx::array NormalizeIndices(const mx::array& idx, int32_t n, mx::Stream s) {
  const mx::Dtype t = idx.dtype();
  const mx::array wrapped =
      mx::where(mx::less(idx, mx::array(0, t), s), mx::add(idx, mx::array(n, t), s), idx, s);
  return mx::clip(wrapped, mx::array(0, t), mx::array(n - 1, t), s);
}

/** Fails the run (after evaluation, OpContext::Require) unless every index lies in [-n, n-1], the
 *  range ORT's kernels accept; the clamped indices above keep the evaluation itself in bounds. */
inline void RequireInBounds(const OpContext& c, const mx::array& idx, int32_t n) {
  // One fused elementwise compare and all(): measured within noise of no check (reliability.md);
  // min()/max() reductions instead were slower on MLX's CPU device.
  const mx::Stream s = c.stream;
  c.Require(mx::logical_and(mx::greater_equal(idx, mx::array(-n, idx.dtype()), s),
                            mx::less(idx, mx::array(n, idx.dtype()), s), s),
            "indices element out of data bounds (each must lie within [-n, n-1] for an axis of n)");
}

}  // namespace indexing
}  // namespace mlx_ep
