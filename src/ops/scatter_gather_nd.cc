// Op family: indexing. GatherND, ScatterND, ScatterElements, Scatter here; OneHot in one_hot.cc.
//
// Semantics mirrored from ORT's CPU kernels (checked against them):
//  - indices count from the end when negative ([-n, n-1]). ORT errors on indices outside that
//    range; a compiled MLX graph cannot raise on data and MLX's gather/scatter do not check bounds,
//    so out-of-range indices are clamped into [0, n-1] instead: never an out-of-bounds access, but
//    a read or write of the nearest end element where ORT would fail.
//  - scatters apply their updates in row-major order of the indices, as ORT and the ONNX reference
//    do, rounding in the data type after each update. Duplicate indices with reduction "none" are
//    undefined in ONNX; ORT and MLX's CPU scatter both let the last update win, MLX's GPU scatter
//    does not promise an order. Duplicates with add/mul/max/min are well defined (equal on CPU).
//  - ORT's CPU EP has no kernel for float16/bfloat16 add/mul, bool max/min, or (ScatterND)
//    float16/bfloat16 max/min; those follow the ONNX reference (bool add/max = or, mul/min = and).
//  - GatherND/ScatterND take int64 indices (their schema), ScatterElements/Scatter int32 or int64.
//    The indices' last dim k may be 0 (as ORT accepts): each index row then means all of data.
#include <algorithm>

#include "ops/claim_util.h"
#include "ops/indexing_internal.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

using shape_util::NormAxis;

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

/** The reduction attribute of a scatter node: "none" before opset 16, add/mul from 16, max/min from 18. */
std::optional<Reduction> ParseReduction(const Node& n) {
  const std::string r = n.AttrString("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (n.since_version >= 16 && r == "add") return Reduction::kAdd;
  if (n.since_version >= 16 && r == "mul") return Reduction::kMul;
  if (n.since_version >= 18 && r == "max") return Reduction::kMax;
  if (n.since_version >= 18 && r == "min") return Reduction::kMin;
  return std::nullopt;
}

/** Claims shared by the scatters: int32/int64 indices (int64 only for ScatterND, as its schema),
 *  updates of the data's type, a reduction the node's opset defines. */
Claim ClaimScatter(const NodeView& v) {
  for (size_t i = 0; i < 3; ++i)
    if (!v.has_input(i)) return Claim::No("input " + std::to_string(i) + " is missing");
  if (v.node().op_type == "ScatterND" && v.input_type(1) != ElemType::kInt64)
    return Claim::No(TypeReason(v, 1, "indices must be int64"));
  if (!IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 1, "indices must be int32 or int64"));
  if (v.input_type(2) != v.input_type(0)) return Claim::No("updates and data have different types");
  if (!ParseReduction(v.node()))
    return Claim::No("reduction '" + v.node().AttrString("reduction", "") + "' is not defined in opset " +
                     std::to_string(v.node().since_version));
  const bool gpu = RuntimeDevice() == mx::Device(mx::Device::gpu);
  // MLX's GPU scatter has no 8-byte element types yet (it throws).
  if (gpu && IsOneOf(v.input_type(0), {ElemType::kInt64, ElemType::kUInt64, ElemType::kDouble}))
    return Claim::No(TypeReason(v, 0, "MLX's GPU scatter lacks 8-byte types"));
  // ORT's max/min is out = out > u ? out : u (min: <): a NaN update wins and NaN data is replaced.
  // MLX's GPU scatter keeps NaN data and drops NaN updates (measured on the H200), and NaNs are
  // runtime data: not claimed for floats there.
  const Reduction red = *ParseReduction(v.node());
  if (gpu && (red == Reduction::kMax || red == Reduction::kMin) &&
      IsOneOf(v.input_type(0), {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No("reduction '" + v.node().AttrString("reduction", "") +
                     "' on floats: MLX's GPU scatter does not follow ORT's NaN rule");
  return Claim::Yes();
}

/** mx::scatter with the node's reduction. */
mx::array Scatter(Reduction red, const mx::array& data, const std::vector<mx::array>& indices,
                  const mx::array& updates, const std::vector<int>& axes, mx::Stream s) {
  switch (red) {
    case Reduction::kAdd:
      return mx::scatter_add(data, indices, updates, axes, s);
    case Reduction::kMul:
      return mx::scatter_prod(data, indices, updates, axes, s);
    case Reduction::kMax:
      return mx::scatter_max(data, indices, updates, axes, s);
    case Reduction::kMin:
      return mx::scatter_min(data, indices, updates, axes, s);
    case Reduction::kNone:
      break;
  }
  return mx::scatter(data, indices, updates, axes, s);
}

/** Positions 0, 1, ..., shape[dim] - 1 along dim `dim`, broadcast to `shape`. */
mx::array PositionsAlong(int dim, const mx::Shape& shape, mx::Stream s) {
  mx::Shape along(shape.size(), 1);
  along[dim] = shape[dim];
  return mx::broadcast_to(mx::reshape(mx::arange(shape[dim], mx::int32, s), along, s), shape, s);
}

/** Column t of [..., k] indices, normalized for a dim of size n (n > 0); out-of-range ones fail
 *  the run after evaluation (indexing::RequireInBounds). */
mx::array IndexColumn(const OpContext& c, const mx::array& idx, int t, int32_t n) {
  const mx::array column = mx::take(idx, t, -1, c.stream);
  indexing::RequireInBounds(c, column, n);
  return indexing::NormalizeIndices(column, n, c.stream);
}

// ---------------------------------------------------------------------------------------------
// GatherND (11; batch_dims from 12; 13 adds bfloat16)

Claim ClaimGatherND(const NodeView& v) {
  if (!v.has_input(0) || !v.has_input(1)) return Claim::No("inputs data/indices are missing");
  if (v.input_type(1) != ElemType::kInt64) return Claim::No(TypeReason(v, 1, "indices must be int64"));
  return Claim::Yes();
}

// out[b..., i...] = data[b..., idx[b..., i..., 0], ..., idx[b..., i..., k-1], ...]: one mx::gather
// whose index arrays are the batch positions (for the first batch_dims dims) and the k columns of
// the indices, all of the indices' shape without the last dim.
std::vector<mx::array> TranslateGatherND(const OpContext& c) {
  const mx::array& x = c.input(0);
  const mx::array& idx = c.input(1);
  const int r = x.ndim(), q = idx.ndim();
  const int64_t b = c.node.since_version >= 12 ? c.node.AttrInt("batch_dims", 0) : 0;
  if (r < 1 || q < 1) c.Fail("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(q, r)) c.Fail("batch_dims must be in [0, min(rank(data), rank(indices)))");
  const int k = idx.shape(-1);
  if (k > r - b) c.Fail("the last dim of indices is larger than rank(data) - batch_dims");
  for (int d = 0; d < b; ++d)
    if (idx.shape(d) != x.shape(d)) c.Fail("batch dims of data and indices differ");

  const mx::Shape prefix(idx.shape().begin(), idx.shape().end() - 1);
  mx::Shape out_shape = prefix;
  out_shape.insert(out_shape.end(), x.shape().begin() + b + k, x.shape().end());
  const mx::Stream s = c.stream;
  if (std::find(out_shape.begin(), out_shape.end(), 0) != out_shape.end())
    return {mx::zeros(out_shape, x.dtype(), s)};
  if (b + k == 0) return {mx::broadcast_to(x, out_shape, s)};

  std::vector<mx::array> indices;
  std::vector<int> axes;
  for (int d = 0; d < b; ++d) {
    indices.push_back(PositionsAlong(d, prefix, s));
    axes.push_back(d);
  }
  for (int t = 0; t < k; ++t) {
    const int32_t n = x.shape(b + t);
    if (n == 0) c.Fail("indices point into an empty dimension");
    indices.push_back(IndexColumn(c, idx, t, n));
    axes.push_back(b + t);
  }
  mx::Shape slice_sizes = x.shape();
  std::fill(slice_sizes.begin(), slice_sizes.begin() + b + k, 1);
  return {mx::reshape(mx::gather(x, indices, axes, slice_sizes, s), out_shape, s)};
}

// ---------------------------------------------------------------------------------------------
// ScatterND (11; 13 adds bfloat16; reduction add/mul from 16, max/min from 18)

// output[idx[i..., 0], ..., idx[i..., k-1], ...] (op)= updates[i..., ...]: mx::scatter over the first
// k dims with the k index columns; the updates get k unit dims for the indexed (size-1) slice dims.
std::vector<mx::array> TranslateScatterND(const OpContext& c) {
  const mx::array& data = c.input(0);
  const mx::array& idx = c.input(1);
  const mx::array& upd = c.input(2);
  const int r = data.ndim(), q = idx.ndim();
  if (r < 1 || q < 1) c.Fail("data and indices must have rank >= 1");
  const int k = idx.shape(-1);
  if (k > r) c.Fail("the last dim of indices is larger than rank(data)");
  const mx::Shape prefix(idx.shape().begin(), idx.shape().end() - 1);
  mx::Shape upd_shape = prefix;
  upd_shape.insert(upd_shape.end(), data.shape().begin() + k, data.shape().end());
  if (upd.shape() != upd_shape) c.Fail("updates must have shape indices.shape[:-1] + data.shape[k:]");
  if (upd.size() == 0) return {data};

  const mx::Stream s = c.stream;
  const Reduction red = *ParseReduction(c.node);
  if (k == 0) {
    // Every update covers all of data: scatter into a leading unit dim at index 0, in order.
    mx::Shape unit = prefix;
    unit.push_back(1);
    unit.insert(unit.end(), data.shape().begin(), data.shape().end());
    const mx::array out = Scatter(red, mx::expand_dims(data, 0, s), {mx::zeros(prefix, mx::int32, s)},
                                  mx::reshape(upd, unit, s), {0}, s);
    return {mx::squeeze(out, 0, s)};
  }
  std::vector<mx::array> indices;
  std::vector<int> axes;
  for (int t = 0; t < k; ++t) {
    const int32_t n = data.shape(t);
    if (n == 0) c.Fail("indices point into an empty dimension");
    indices.push_back(IndexColumn(c, idx, t, n));
    axes.push_back(t);
  }
  mx::Shape unit = prefix;
  unit.insert(unit.end(), k, 1);
  unit.insert(unit.end(), data.shape().begin() + k, data.shape().end());
  return {Scatter(red, data, indices, mx::reshape(upd, unit, s), axes, s)};
}

// ---------------------------------------------------------------------------------------------
// ScatterElements (11; 13 adds bfloat16; reduction add/mul from 16, max/min from 18) and
// Scatter (9-10; deprecated in 11 in favour of ScatterElements, which it equals).

// output[i0, ..., idx[i0..], ..., i(r-1)] (op)= updates[i0, ..., i(r-1)] with idx at `axis`; the
// indices may be smaller than data on every dim.
std::vector<mx::array> TranslateScatterElements(const OpContext& c) {
  const mx::array& data = c.input(0);
  const mx::array& idx = c.input(1);
  const mx::array& upd = c.input(2);
  const int r = data.ndim();
  if (r < 1) c.Fail("data must have rank >= 1");
  if (static_cast<int>(idx.ndim()) != r) c.Fail("data and indices must have the same rank");
  if (upd.shape() != idx.shape()) c.Fail("updates and indices must have the same shape");
  const int axis = NormAxis(c, c.node.AttrInt("axis", 0), r);
  bool same_extent = true;  // indices span data on every dim but the axis
  for (int d = 0; d < r; ++d) {
    if (d == axis) continue;
    if (idx.shape(d) > data.shape(d))
      c.Fail("indices dimension " + std::to_string(d) + " is larger than data's");
    same_extent = same_extent && idx.shape(d) == data.shape(d);
  }
  if (idx.size() == 0) return {data};
  const int32_t n = data.shape(axis);
  if (n == 0) c.Fail("indices point into an empty axis");

  const mx::Stream s = c.stream;
  const Reduction red = *ParseReduction(c.node);
  indexing::RequireInBounds(c, idx, n);
  const mx::array at = indexing::NormalizeIndices(idx, n, s);
  if (same_extent && red == Reduction::kNone) return {mx::put_along_axis(data, at, upd, axis, s)};
  if (same_extent && red == Reduction::kAdd) return {mx::scatter_add_axis(data, at, upd, axis, s)};

  // One index array per dim: positions along the other dims, `at` along the axis.
  std::vector<mx::array> indices;
  std::vector<int> axes;
  for (int d = 0; d < r; ++d) {
    indices.push_back(d == axis ? at : PositionsAlong(d, idx.shape(), s));
    axes.push_back(d);
  }
  mx::Shape unit = idx.shape();
  unit.insert(unit.end(), r, 1);
  return {Scatter(red, data, indices, mx::reshape(upd, unit, s), axes, s)};
}

}  // namespace

void RegisterIndexingOps(OpRegistry& r) {
  // Ranges end at the last schema version (a node's since_version): GatherND 11/12/13,
  // ScatterND and ScatterElements 11/13/16/18, Scatter 9 (deprecated from 11). One translation
  // each, reading batch_dims (12+) and reduction (16+, 18+) per the node's version.
  r.Add({"", "GatherND", 11, 13, ClaimGatherND, TranslateGatherND});
  r.Add({"", "ScatterND", 11, 18, ClaimScatter, TranslateScatterND});
  r.Add({"", "ScatterElements", 11, 18, ClaimScatter, TranslateScatterElements});
  r.Add({"", "Scatter", 9, 9, ClaimScatter, TranslateScatterElements});
  RegisterOneHotOps(r);
}

}  // namespace mlx_ep
