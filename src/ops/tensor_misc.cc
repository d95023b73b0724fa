// Op family: tensor rearrangement and selection. DepthToSpace, SpaceToDepth, Trilu, CenterCropPad
// and EyeLike only move (or make) data, so every type MLX holds is exact. CumSum and TopK:
//  - CumSum adds in the input type along the axis in order (MLX's scan, like ORT's loop); exclusive
//    shifts in a 0, reverse runs from the end. CumProd (26) multiplies the same way (exclusive
//    shifts in a 1). float16/bfloat16 scan in float32 and round each output once, as ORT does.
//  - TopK orders by value, ties by the lower index first, as ORT's comparator does. MLX's sorts are
//    stable, so a stable ascending argsort of the values (smallest) or of their bitwise inverse
//    (largest; ~x reverses the order of every integer type without overflow) gives exactly that
//    order. Floating inputs are taken only for k = 1: with NaNs ORT's comparator is not a strict
//    order and its result depends on its heap/nth_element selection, which nothing else reproduces;
//    for k = 1 ORT scans for the first strictly better value (so a NaN wins only in first place),
//    which is reproduced below. Unsorted (sorted=0) results are ORT's internal order; k = 1 only.
#include <algorithm>
#include <limits>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

using shape_util::Dims;
using shape_util::NormAxis;

// ---------------------------------------------------------------------------------------------
// DepthToSpace, SpaceToDepth

Claim ClaimSpaceDepth(const NodeView& v) {
  if (v.node().AttrInt("blocksize", 0) <= 0)
    return Claim::No("attribute blocksize is missing or not positive");
  const std::string mode = v.node().AttrString("mode", "DCR");
  const bool has_crd = v.node().op_type == "DepthToSpace" && v.node().since_version >= 11;
  if (mode != "DCR" && !(has_crd && mode == "CRD")) return Claim::No("mode '" + mode + "' is not supported");
  if (auto r = v.input_rank(0); r && *r != 4) return Claim::No("input must have rank 4");
  return Claim::Yes();
}

std::vector<mx::array> TranslateDepthToSpace(const OpContext& c) {
  const mx::array& x = c.input(0);
  if (x.ndim() != 4) c.Fail("input must have rank 4");
  const int bs = static_cast<int>(c.node.AttrInt("blocksize", 0));
  const int b = x.shape(0), ch = x.shape(1), h = x.shape(2), w = x.shape(3);
  if (ch % (bs * bs) != 0) c.Fail("channels must be a multiple of blocksize * blocksize");
  const int oc = ch / (bs * bs);
  const bool crd = c.node.AttrString("mode", "DCR") == "CRD";
  mx::array t =
      crd ? mx::reshape(x, {b, oc, bs, bs, h, w}, c.stream) : mx::reshape(x, {b, bs, bs, oc, h, w}, c.stream);
  t = crd ? mx::transpose(t, {0, 1, 4, 2, 5, 3}, c.stream) : mx::transpose(t, {0, 3, 4, 1, 5, 2}, c.stream);
  return {mx::reshape(t, {b, oc, h * bs, w * bs}, c.stream)};
}

std::vector<mx::array> TranslateSpaceToDepth(const OpContext& c) {
  const mx::array& x = c.input(0);
  if (x.ndim() != 4) c.Fail("input must have rank 4");
  const int bs = static_cast<int>(c.node.AttrInt("blocksize", 0));
  const int b = x.shape(0), ch = x.shape(1), h = x.shape(2), w = x.shape(3);
  if (h % bs != 0 || w % bs != 0) c.Fail("height and width must be multiples of blocksize");
  mx::array t = mx::reshape(x, {b, ch, h / bs, bs, w / bs, bs}, c.stream);
  t = mx::transpose(t, {0, 3, 5, 1, 2, 4}, c.stream);
  return {mx::reshape(t, {b, ch * bs * bs, h / bs, w / bs}, c.stream)};
}

// ---------------------------------------------------------------------------------------------
// Trilu

Claim ClaimTrilu(const NodeView& v) {
  if (auto r = v.input_rank(0); r && *r < 2) return Claim::No("input must have rank >= 2");
  if (v.has_input(1)) return Claim::Yes({1});
  return Claim::Yes();
}

std::vector<mx::array> TranslateTrilu(const OpContext& c) {
  const mx::array& x = c.input(0);
  if (x.ndim() < 2) c.Fail("input must have rank >= 2");
  const int n = x.shape(-2), m = x.shape(-1);
  // Keep j <= i + k (lower) or j >= i + k (upper); k beyond the matrix means keep all or nothing.
  const int64_t k = c.has_input(1) ? HostScalar(c, c.host(1), "k") : 0;
  const bool upper = c.node.AttrInt("upper", 1) != 0;
  const int64_t kk = std::clamp<int64_t>(upper ? k - 1 : k, -static_cast<int64_t>(n) - 1, m + 1);
  const mx::array lower_mask = mx::tri(n, m, static_cast<int>(kk), mx::bool_, c.stream);
  const mx::array zero(0, x.dtype());
  if (upper) return {mx::where(lower_mask, zero, x, c.stream)};
  return {mx::where(lower_mask, x, zero, c.stream)};
}

// ---------------------------------------------------------------------------------------------
// CumSum

// ORT's kernels reject exclusive/reverse other than 0 or 1 when they are created: left to them.
Claim ClaimScanFlags(const NodeView& v) {
  for (const char* flag : {"exclusive", "reverse"}) {
    const int64_t f = v.node().AttrInt(flag, 0);
    if (f != 0 && f != 1) return Claim::No(std::string("attribute ") + flag + "=" + std::to_string(f));
  }
  return Claim::Yes();
}

Claim ClaimCumSum(const NodeView& v) {
  if (Claim flags = ClaimScanFlags(v); !flags.ok) return flags;
  const ElemType t = v.input_type(0);
  const bool v14 = v.node().since_version >= 14;
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kDouble, ElemType::kInt32, ElemType::kInt64, ElemType::kUInt32,
                   ElemType::kUInt64}) &&
      !(v14 && IsOneOf(t, {ElemType::kFloat16, ElemType::kBFloat16})))
    return Claim::No(TypeReason(v, 0));
  if (!v.has_input(1)) return Claim::No("input axis is missing");
  if (!IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 1, "axis must be int32 or int64"));
  return Claim::Yes({1});
}

/** CumSum or CumProd of input 0 along the host-value axis (input 1). float16/bfloat16 scan in
 *  float32 and round each output once, as ORT's float16 kernels do: rounding every partial result to
 *  float16 drifts by several ulps along a row. bfloat16 (no ORT kernel) is done the same way. */
std::vector<mx::array> TranslateScan(const OpContext& c, bool product) {
  const mx::array& x = c.input(0);
  if (x.ndim() == 0) c.Fail("cannot apply " + c.node.op_type + " to a scalar");
  if (c.host(1).shape.size() > 1) c.Fail("axis must be a scalar or a 1-D tensor");
  const int axis = NormAxis(c, HostScalar(c, c.host(1), "axis"), x.ndim());
  if (x.size() == 0) return {x};
  const bool reverse = c.node.AttrInt("reverse", 0) != 0;
  const bool inclusive = c.node.AttrInt("exclusive", 0) == 0;
  const bool half = x.dtype() == mx::float16 || x.dtype() == mx::bfloat16;
  const mx::array in = half ? mx::astype(x, mx::float32, c.stream) : x;
  const mx::array y = product ? mx::cumprod(in, axis, reverse, inclusive, c.stream)
                              : mx::cumsum(in, axis, reverse, inclusive, c.stream);
  return {half ? mx::astype(y, x.dtype(), c.stream) : y};
}

std::vector<mx::array> TranslateCumSum(const OpContext& c) { return TranslateScan(c, false); }

// ---------------------------------------------------------------------------------------------
// CumProd

Claim ClaimCumProd(const NodeView& v) {
  if (Claim flags = ClaimScanFlags(v); !flags.ok) return flags;
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16, ElemType::kDouble,
                   ElemType::kInt32, ElemType::kInt64, ElemType::kUInt32, ElemType::kUInt64}))
    return Claim::No(TypeReason(v, 0));
  if (!DeviceSupports(t)) return Claim::No(TypeReason(v, 0, "not supported on the MLX device"));
  if (!v.has_input(1)) return Claim::No("input axis is missing");
  if (!IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 1, "axis must be int32 or int64"));
  return Claim::Yes({1});
}

std::vector<mx::array> TranslateCumProd(const OpContext& c) { return TranslateScan(c, true); }

// ---------------------------------------------------------------------------------------------
// TopK

/** k when the claim can know it (attribute before 10, a constant K after), else -1. */
int64_t StaticK(const NodeView& v) {
  if (v.node().since_version < 10) return v.node().AttrInt("k", -1);
  const Tensor* t = v.constant_input(1);
  if (!t || t->NumElements() != 1) return -1;
  return t->ToInt64()[0];
}

Claim ClaimTopK(const NodeView& v) {
  const int ver = v.node().since_version;
  if (ver < 10 && !v.node().Attr("k")) return Claim::No("attribute k is missing");
  if (ver >= 10 && (!v.has_input(1) || v.input_type(1) != ElemType::kInt64))
    return Claim::No("input K is missing or not int64");
  const ElemType t = v.input_type(0);
  if (!IsNumeric(t)) return Claim::No(TypeReason(v, 0));
  const int64_t k = StaticK(v);
  if (IsFloating(t) && k != 1)
    return Claim::No(
        "floating TopK with k != 1 (or k unknown): ORT's order with NaNs depends on its selection "
        "algorithm");
  if (ver >= 11 && v.node().AttrInt("sorted", 1) == 0 && k != 1)
    return Claim::No("sorted=0 with k != 1 returns ORT's internal order");
  if (ver >= 10) return Claim::Yes({1});
  return Claim::Yes();
}

/** Keys whose stable ascending order is TopK's order, and for floats a mask of leading NaNs. */
mx::array TopKOrder(const OpContext& c, const mx::array& x, int axis, bool largest) {
  if (!mx::issubdtype(x.dtype(), mx::floating)) {
    const mx::array key = largest ? mx::bitwise_invert(x, c.stream) : x;
    return mx::argsort(key, axis, c.stream);
  }
  // k = 1 over floats: ORT keeps the first value no later one strictly beats. NaNs beat nothing, so
  // they only count in first place (handled by the caller); elsewhere they are the worst values.
  const mx::array inf(
      largest ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity(), x.dtype());
  mx::array key = mx::where(mx::isnan(x, c.stream), inf, x, c.stream);
  if (largest) key = mx::negative(key, c.stream);
  return mx::argsort(key, axis, c.stream);
}

std::vector<mx::array> TranslateTopK(const OpContext& c) {
  const mx::array& x = c.input(0);
  if (x.ndim() == 0) c.Fail("input must have rank >= 1");
  const int ver = c.node.since_version;
  const int axis = NormAxis(c, c.node.AttrInt("axis", -1), x.ndim());
  const int64_t k = ver < 10 ? c.node.AttrInt("k", -1) : HostScalar(c, c.host(1), "K");
  if (k < 0 || k > x.shape(axis)) c.Fail("k must lie in [0, size of the axis]");
  if (mx::issubdtype(x.dtype(), mx::floating) && k != 1) c.Fail("floating TopK is only translated for k = 1");
  const bool largest = ver < 11 || c.node.AttrInt("largest", 1) != 0;

  mx::Shape out_shape = x.shape();
  out_shape[axis] = static_cast<int32_t>(k);
  if (k == 0 || x.size() == 0)
    return {mx::zeros(out_shape, x.dtype(), c.stream), mx::zeros(out_shape, mx::int64, c.stream)};
  mx::Shape start(x.ndim(), 0), stop = out_shape;
  mx::array idx = mx::slice(TopKOrder(c, x, axis, largest), start, stop, c.stream);
  if (mx::issubdtype(x.dtype(), mx::floating)) {
    mx::Shape first_stop = x.shape();
    first_stop[axis] = 1;
    const mx::array first_is_nan = mx::isnan(mx::slice(x, start, first_stop, c.stream), c.stream);
    idx = mx::where(first_is_nan, mx::array(0, idx.dtype()), idx, c.stream);
  }
  idx = mx::astype(idx, mx::int32, c.stream);
  return {mx::take_along_axis(x, idx, axis, c.stream), mx::astype(idx, mx::int64, c.stream)};
}

// ---------------------------------------------------------------------------------------------
// CenterCropPad

Claim ClaimCenterCropPad(const NodeView& v) {
  if (!v.has_input(1) || !IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No("input shape is missing or not int32/int64");
  return Claim::Yes({1});
}

// Each listed axis is cropped (centered; an odd excess drops one more at the end) or zero-padded
// (centered; an odd excess pads one more at the end) to the requested size.
std::vector<mx::array> TranslateCenterCropPad(const OpContext& c) {
  mx::array y = c.input(0);
  const int64_t rank = y.ndim();
  const std::vector<int64_t> sizes = c.host_ints(1);
  std::vector<int64_t> axes = c.node.AttrInts("axes").value_or(std::vector<int64_t>{});
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  if (sizes.size() != axes.size()) c.Fail("shape must hold one size per axis");
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int axis = NormAxis(c, axes[i], rank);
    if (seen[axis]) c.Fail("axes has duplicates");
    seen[axis] = true;
    const int64_t dim = y.shape(axis), want = sizes[i];
    if (want < 0 || want > std::numeric_limits<int32_t>::max()) c.Fail("sizes must be non-negative");
    if (want < dim) {
      mx::Shape start(rank, 0), stop = y.shape();
      start[axis] = static_cast<int32_t>((dim - want) / 2);
      stop[axis] = static_cast<int32_t>(start[axis] + want);
      y = mx::slice(y, start, stop, c.stream);
    } else if (want > dim) {
      const int32_t lo = static_cast<int32_t>((want - dim) / 2), hi = static_cast<int32_t>(want - dim - lo);
      y = mx::pad(y, {axis}, {lo}, {hi}, mx::array(0, y.dtype()), "constant", c.stream);
    }
  }
  return {y};
}

// ---------------------------------------------------------------------------------------------
// EyeLike

Claim ClaimEyeLike(const NodeView& v) {
  if (auto r = v.input_rank(0); r && *r != 2) return Claim::No("input must have rank 2");
  return Claim::Yes();
}

std::vector<mx::array> TranslateEyeLike(const OpContext& c) {
  const mx::array& x = c.input(0);
  if (x.ndim() != 2) c.Fail("input must have rank 2");
  const int n = x.shape(0), m = x.shape(1);
  const int64_t k = c.node.AttrInt("k", 0);
  const mx::Dtype dtype = c.output_dtype(0);
  const mx::Stream s = c.stream;
  if (k >= m || k <= -static_cast<int64_t>(n)) return {mx::zeros({n, m}, dtype, s)};
  // Ones where column - row == k, by comparison rather than mx::eye, which scatters the ones and
  // so fails on GPUs for 8-byte types (MLX's GPU scatter has none).
  const mx::array rows = mx::reshape(mx::arange(n, mx::int32, s), {n, 1}, s);
  const mx::array columns = mx::reshape(mx::arange(m, mx::int32, s), {1, m}, s);
  const mx::array diagonal =
      mx::equal(mx::subtract(columns, rows, s), mx::array(static_cast<int>(k), mx::int32), s);
  return {mx::astype(diagonal, dtype, s)};
}

}  // namespace

void RegisterTensorMiscOps(OpRegistry& r) {
  // DepthToSpace: 11 adds mode (DCR/CRD), 13 bfloat16. SpaceToDepth: 13 adds bfloat16.
  r.Add({"", "DepthToSpace", 1, 10, ClaimSpaceDepth, TranslateDepthToSpace});
  r.Add({"", "DepthToSpace", 11, 12, ClaimSpaceDepth, TranslateDepthToSpace});
  r.Add({"", "DepthToSpace", 13, 25, ClaimSpaceDepth, TranslateDepthToSpace});
  r.Add({"", "SpaceToDepth", 1, 12, ClaimSpaceDepth, TranslateSpaceToDepth});
  r.Add({"", "SpaceToDepth", 13, 25, ClaimSpaceDepth, TranslateSpaceToDepth});
  r.Add({"", "Trilu", 14, 25, ClaimTrilu, TranslateTrilu, HostEval::kFromValues});  // causal masks fold
  // CumSum: 14 adds float16/bfloat16.
  r.Add({"", "CumSum", 11, 13, ClaimCumSum, TranslateCumSum});
  r.Add({"", "CumSum", 14, 25, ClaimCumSum, TranslateCumSum});
  r.Add({"", "CumProd", 26, 26, ClaimCumProd, TranslateCumProd});
  // TopK: 1-9 k attribute; 10 K input; 11 largest/sorted and negative axis; 24 bfloat16.
  r.Add({"", "TopK", 1, 9, ClaimTopK, TranslateTopK});
  r.Add({"", "TopK", 10, 10, ClaimTopK, TranslateTopK});
  r.Add({"", "TopK", 11, 23, ClaimTopK, TranslateTopK});
  r.Add({"", "TopK", 24, 25, ClaimTopK, TranslateTopK});
  r.Add({"", "CenterCropPad", 18, 25, ClaimCenterCropPad, TranslateCenterCropPad});
  // EyeLike: 22 adds bfloat16 and more types.
  r.Add({"", "EyeLike", 9, 21, ClaimEyeLike, TranslateEyeLike});
  r.Add({"", "EyeLike", 22, 25, ClaimEyeLike, TranslateEyeLike});
}

}  // namespace mlx_ep
