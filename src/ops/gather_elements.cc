// Op family: tensor (selection). GatherElements, registered from RegisterTensorOps (tensor.cc).
// It only moves data, so every type MLX holds is exact.
#include "ops/claim_util.h"
#include "ops/indexing_internal.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"
#include "ops/tensor_internal.h"

namespace mlx_ep {
namespace {

using shape_util::NormAxis;

Claim ClaimGatherElements(const NodeView& v) {
  if (!v.has_input(0) || !v.has_input(1)) return Claim::No("inputs data/indices are missing");
  if (!IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 1, "indices must be int32 or int64"));
  return Claim::Yes();
}

// out[i0..i(r-1)] = data[i0..idx[i0..i(r-1)]..i(r-1)] (idx at position `axis`): the output has the
// indices' shape, which may be smaller than data's on the other dims. mx::take_along_axis
// broadcasts data and indices against each other instead, so data is first sliced to the indices'
// extent on every other dim (then the shapes agree and nothing is broadcast).
//
// ONNX indices lie in [-n, n-1]; negative ones count from the end. ORT's CPU kernel errors on
// indices outside that range; a compiled MLX graph cannot raise on data, so out-of-range indices
// are clamped into [0, n-1] (never read out of bounds) and a runtime check fails the run after
// evaluation, as for Gather.
std::vector<mx::array> TranslateGatherElements(const OpContext& c) {
  const mx::array& x = c.input(0);
  mx::array idx = c.input(1);
  const int64_t rank = x.ndim();
  if (rank == 0) c.Fail("data must have rank >= 1");
  if (static_cast<int64_t>(idx.ndim()) != rank) c.Fail("data and indices must have the same rank");
  const int axis = NormAxis(c, c.node.AttrInt("axis", 0), rank);

  mx::Shape start(rank, 0), stop(x.shape());
  bool sliced = false;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis) continue;
    if (idx.shape(d) > x.shape(d))
      c.Fail("indices dimension " + std::to_string(d) + " is larger than data's");
    if (idx.shape(d) != x.shape(d)) {
      stop[d] = idx.shape(d);
      sliced = true;
    }
  }
  if (idx.size() == 0) return {mx::zeros(idx.shape(), x.dtype(), c.stream)};
  const int32_t n = x.shape(axis);
  if (n == 0) c.Fail("indices are out of range for an empty axis");

  indexing::RequireInBounds(c, idx, n);
  const mx::array size(n, idx.dtype());
  idx = mx::where(mx::less(idx, mx::array(0, idx.dtype()), c.stream), mx::add(idx, size, c.stream), idx,
                  c.stream);
  idx = mx::clip(idx, mx::array(0, idx.dtype()), mx::array(n - 1, idx.dtype()), c.stream);
  const mx::array data = sliced ? mx::slice(x, start, stop, c.stream) : x;
  return {mx::take_along_axis(data, idx, axis, c.stream)};
}

}  // namespace

void RegisterGatherElementsOps(OpRegistry& r) {
  // Schema versions 11 and 13 (13 adds bfloat16) compute the same thing.
  r.Add({"", "GatherElements", 11, 25, ClaimGatherElements, TranslateGatherElements});
}

}  // namespace mlx_ep
