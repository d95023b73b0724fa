// Op family: pooling (continued). GlobalAveragePool, GlobalMaxPool, GlobalLpPool and MaxUnpool,
// registered from RegisterPoolOps (pool.cc).
//
//  - Global pools reduce every spatial dim to 1; float16/bfloat16 compute in float32 and round
//    once (as ORT). GlobalMaxPool starts from the type's lowest value like ORT's kernel, so a
//    channel of -inf gives that lowest value.
//  - MaxUnpool (ORT 1.23's kernel): the output has output_shape when given (same N and C, each
//    spatial dim at least the inferred (in-1)*stride - pads + kernel), else the inferred shape; it is
//    zero except Y.flat[I.flat[e]] = X.flat[e], a later e winning at a repeated index. ORT fails on
//    an index outside [0, output size); a compiled MLX graph cannot raise on data, so such
//    elements are left out while it runs and a runtime check fails the run afterwards.
#include <limits>

#include "ops/pool_internal.h"
#include "ops/reduction_internal.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

/** The spatial axes 2..rank-1 of `x`. */
std::vector<int> SpatialAxes(const mx::array& x) {
  std::vector<int> axes;
  for (int i = 2; i < static_cast<int>(x.ndim()); ++i) axes.push_back(i);
  return axes;
}

/** (N, C, 1, ...) of a global pool over `x`. */
mx::Shape GlobalShape(const mx::array& x) {
  mx::Shape s(x.ndim(), 1);
  s[0] = x.shape(0);
  s[1] = x.shape(1);
  return s;
}

Claim ClaimGlobal(const NodeView& v) {
  if (auto r = pool::TypeReason0(v, kFloatTypes)) return Claim::No(*r);
  if (auto r = pool::RankReason(v)) return Claim::No(*r);
  return Claim::Yes();
}

Claim ClaimGlobalLp(const NodeView& v) {
  if (const Attribute* p = v.node().Attr("p"); p && p->kind != Attribute::Kind::kInt)
    return Claim::No("attribute p is not an integer");
  const int64_t p = v.node().AttrInt("p", 2);
  if (p < 1) return Claim::No("p=" + std::to_string(p) + " (only p >= 1)");
  return ClaimGlobal(v);
}

/** Input 0 in its compute dtype after the checks ORT makes; nullopt when there is nothing to pool. */
std::optional<mx::array> GlobalInput(const OpContext& c) {
  const mx::array& x = c.input(0);
  pool::CheckInput(c, x);
  if (x.size() == 0) return std::nullopt;
  return mx::astype(x, pool::ComputeDtype(x.dtype()), c.stream);
}

std::vector<mx::array> TranslateGlobalAverage(const OpContext& c) {
  const mx::Stream s = c.stream;
  const std::optional<mx::array> x = GlobalInput(c);
  if (!x) return {mx::zeros(GlobalShape(c.input(0)), c.output_dtype(0), s)};
  const std::vector<int> axes = SpatialAxes(*x);
  double count = 1;
  for (int a : axes) count *= x->shape(a);
  const mx::array y = mx::divide(AccurateSum(*x, axes, true, s), mx::array(count, x->dtype()), s);
  return {mx::astype(y, c.output_dtype(0), s)};
}

std::vector<mx::array> TranslateGlobalMax(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  pool::CheckInput(c, x);
  if (x.size() == 0) return {mx::zeros(GlobalShape(x), x.dtype(), s)};
  return {mx::maximum(mx::max(x, SpatialAxes(x), true, s), pool::Lowest(x.dtype()), s)};
}

std::vector<mx::array> TranslateGlobalLp(const OpContext& c) {
  const mx::Stream s = c.stream;
  const std::optional<mx::array> x = GlobalInput(c);
  if (!x) return {mx::zeros(GlobalShape(c.input(0)), c.output_dtype(0), s)};
  const int64_t p = c.node.AttrInt("p", 2);
  mx::array term = mx::abs(*x, s);
  if (p == 2) term = mx::multiply(term, term, s);
  if (p > 2) term = mx::power(term, mx::array(static_cast<double>(p), x->dtype()), s);
  mx::array y = AccurateSum(term, SpatialAxes(*x), true, s);
  if (p == 2) y = mx::sqrt(y, s);
  if (p > 2) y = mx::power(y, mx::array(1.0f / static_cast<float>(p), x->dtype()), s);
  return {mx::astype(y, c.output_dtype(0), s)};
}

// ---- MaxUnpool ---------------------------------------------------------------------------------

Claim ClaimMaxUnpool(const NodeView& v) {
  if (auto r = pool::TypeReason0(v, kFloatTypes)) return Claim::No(*r);
  if (!v.has_input(1) || v.input_type(1) != ElemType::kInt64)
    return Claim::No("input I is missing or not int64");
  if (auto r = pool::RankReason(v)) return Claim::No(*r);
  if (auto r = pool::AttrsReason(v, /*auto_pad=*/false)) return Claim::No(*r);
  if (v.has_input(2)) return Claim::Yes({2});
  return Claim::Yes();
}

/** The output shape: output_shape when given (checked as ORT checks it), else the inferred one. */
mx::Shape UnpoolShape(const OpContext& c, const mx::array& x) {
  const pool::PoolAttrs a = pool::ReadAttrs(c.node);
  const size_t nd = a.kernel.size();
  if (x.ndim() != nd + 2)
    c.Fail("kernel_shape has " + std::to_string(nd) + " dims for an input of rank " +
           std::to_string(x.ndim()));
  std::vector<int64_t> dims = {x.shape(0), x.shape(1)};
  for (size_t i = 0; i < nd; ++i)
    dims.push_back((x.shape(i + 2) - 1) * a.strides[i] - (a.pads[i] + a.pads[i + nd]) + a.kernel[i]);
  if (c.has_input(2)) {
    const std::vector<int64_t> given = c.host_ints(2);
    if (given.size() != dims.size()) c.Fail("output_shape must have one value per input dim");
    if (given[0] != dims[0] || given[1] != dims[1])
      c.Fail("output_shape batch and channel dimensions must match the input");
    for (size_t i = 2; i < dims.size(); ++i)
      if (given[i] < dims[i]) c.Fail("output_shape is smaller than the minimum required");
    dims = given;
  }
  return shape_util::ToShape(c, dims);
}

std::vector<mx::array> TranslateMaxUnpool(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::array& idx = c.input(1);
  pool::CheckInput(c, x);
  if (idx.shape() != x.shape()) c.Fail("I must have the shape of X");
  const mx::Shape out_shape = UnpoolShape(c, x);
  int64_t total = 1;
  for (int32_t d : out_shape) total *= d;
  if (total >= std::numeric_limits<int32_t>::max() || x.size() >= std::numeric_limits<int32_t>::max())
    c.Fail("more than 2^31 - 2 elements");
  if (x.size() == 0 || total == 0) return {mx::zeros(out_shape, x.dtype(), s)};

  // winner[t]: the last element e with I[e] == t (a scatter-max of positions is deterministic
  // where a plain scatter of values is not); slot `total` takes the out-of-range indices.
  const auto n = static_cast<int32_t>(x.size());
  const mx::array flat_idx = mx::reshape(idx, {n}, s);
  const mx::array in_range = mx::logical_and(mx::greater_equal(flat_idx, mx::array(int64_t{0}), s),
                                             mx::less(flat_idx, mx::array(total), s), s);
  c.Require(in_range, "Index value out of bounds (valid range is [0, output size))");  // as ORT
  const mx::array target = mx::astype(mx::where(in_range, flat_idx, mx::array(total), s), mx::int32, s);
  const mx::array positions = mx::reshape(mx::arange(0, n, 1, s), {n, 1}, s);
  mx::array winner = mx::full({static_cast<int32_t>(total) + 1}, mx::array(-1, mx::int32), s);
  winner = mx::scatter_max(winner, target, positions, 0, s);
  winner = mx::slice(winner, {0}, {static_cast<int32_t>(total)}, s);
  const mx::array values =
      mx::take(mx::reshape(x, {n}, s), mx::maximum(winner, mx::array(0, mx::int32), s), s);
  const mx::array y = mx::where(mx::greater_equal(winner, mx::array(0, mx::int32), s), values,
                                mx::zeros({1}, x.dtype(), s), s);
  return {mx::reshape(y, out_shape, s)};
}

}  // namespace

void RegisterGlobalPoolOps(OpRegistry& r) {
  r.Add({"", "GlobalAveragePool", 1, 25, ClaimGlobal, TranslateGlobalAverage});
  r.Add({"", "GlobalMaxPool", 1, 25, ClaimGlobal, TranslateGlobalMax});
  // GlobalLpPool 1 has a float p and no ORT CPU kernel.
  r.Add({"", "GlobalLpPool", 2, 25, ClaimGlobalLp, TranslateGlobalLp});
  r.Add({"", "MaxUnpool", 9, 25, ClaimMaxUnpool, TranslateMaxUnpool});
}

}  // namespace mlx_ep
