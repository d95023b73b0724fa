// Op family: normalizations of N x C x D1..Dk tensors. BatchNormalization (inference),
// InstanceNormalization, GroupNormalization, LpNormalization, LRN, MeanVarianceNormalization.
//
//  - float16/bfloat16 are computed in float32 and rounded once. ORT's CPU kernels of these ops
//    are float (and some double) only; for float16 ORT inserts Casts around them and removes the
//    float16 round trips between consecutive float nodes (GroupNormalization's function body
//    included), so it too rounds once.
//  - Statistics computed here (Instance/Group/MeanVariance normalization) use accurate two-stage
//    sums, a mean refined once (mean += mean(x - mean)) and the variance as mean((x - mean)^2),
//    never E[x^2] - E[x]^2 (which cancels when the mean is large against the spread; ORT's
//    GroupNormalization body does that, and differs from this by its rounding error only).
//  - BatchNormalization and InstanceNormalization apply ORT's fused form
//    y = x * s' + (B - mean * s') with s' = scale / sqrt(var + epsilon), which keeps the results
//    on ORT's where its two terms cancel. BatchNormalization's training mode (batch statistics,
//    running-statistics outputs) is declined.
#include <algorithm>
#include <cmath>

#include "ops/claim_util.h"
#include "ops/reduction_internal.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"
#include "runtime/device.h"
#include "runtime/scalars.h"  // BehindContiguous

namespace mlx_ep {
namespace {

using shape_util::NormAxis;

bool IsHalf(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }

/** The dtype a normalization computes in: float32 for float16/bfloat16, else the input's. */
mx::Dtype ComputeDtype(mx::Dtype d) { return IsHalf(d) ? mx::float32 : d; }

/** A scalar of `dtype` (so that no type promotion happens). */
mx::array Scalar(double value, mx::Dtype dtype) { return mx::array(value, dtype); }

/** Checks that input `i` is a floating type the schema version takes (bfloat16 only when
 *  `bf16`) and that the MLX device holds it; an empty reason means yes. */
std::string FloatInputReason(const NodeView& v, size_t i, bool bf16) {
  if (!v.has_input(i)) return "input " + std::to_string(i) + " is absent";
  const ElemType t = v.input_type(i);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kDouble}) &&
      !(bf16 && t == ElemType::kBFloat16))
    return TypeReason(v, i);
  if (!DeviceSupports(t)) return TypeReason(v, i, "not supported on the MLX device");
  return "";
}

/** Claim for input 0 (a float type of the schema version) and output 0 of the same type, with
 *  inputs 1.. `same_type_inputs` of X's type, and a known rank of at least `min_rank`. */
Claim ClaimFloatOp(const NodeView& v, bool bf16, size_t same_type_inputs = 0, int64_t min_rank = 0) {
  if (std::string r = FloatInputReason(v, 0, bf16); !r.empty()) return Claim::No(r);
  for (size_t i = 1; i <= same_type_inputs; ++i)
    if (!v.has_input(i) || v.input_type(i) != v.input_type(0))
      return Claim::No("input " + std::to_string(i) + " is absent or its type differs from X's");
  if (v.output_type(0) != v.input_type(0)) return Claim::No("output type differs from the input type");
  if (auto rank = v.input_rank(0); rank && *rank < min_rank)
    return Claim::No("input rank " + std::to_string(*rank) + " is below " + std::to_string(min_rank));
  return Claim::Yes();
}

/** Mean over `axes` (kept), refined once so that the rounding of the first sum cancels. */
mx::array RefinedMean(const mx::array& x, const std::vector<int>& axes, int64_t count, mx::Stream s) {
  const mx::array n = Scalar(static_cast<double>(count), x.dtype());
  const mx::array mean = mx::divide(AccurateSum(x, axes, true, s), n, s);
  return mx::add(mean, mx::divide(AccurateSum(mx::subtract(x, mean, s), axes, true, s), n, s), s);
}

/** Population variance over `axes` (kept) of `centered` = x - mean(x). */
mx::array Variance(const mx::array& centered, const std::vector<int>& axes, int64_t count, mx::Stream s) {
  const mx::array sq = mx::multiply(centered, centered, s);
  return mx::divide(AccurateSum(sq, axes, true, s), Scalar(static_cast<double>(count), centered.dtype()), s);
}

/** a * b, rounded before whatever adds to it. On GPUs MLX fuses elementwise chains into one
 *  kernel whose compiler contracts a * b + c into a fused multiply-add, which rounds once where
 *  ORT rounds twice; where the terms cancel (FusedNormalize) that moves the result by the
 *  rounding of a * b (3e-5 against values near 1 for one value per instance). A Contiguous
 *  between, which MLX does not fuse, ends the kernel at the product (no copy: it shares the buffer). On MLX's
 *  CPU device the product stays fused (its kernels round as ORT's do, measured). */
mx::array RoundedProduct(const mx::array& a, const mx::array& b, mx::Stream s) {
  const mx::array product = mx::multiply(a, b, s);
  return RuntimeDevice().type == mx::Device::cpu ? product : BehindContiguous(product, s);
}

/** ORT's fused normalization y = x * s' + (B - mean * s') with s' = (1 / sqrt(var + eps)) * scale,
 *  rounded in that order. Where the spread is tiny against the mean (one value per instance:
 *  var = 0) its two terms cancel, and the same form keeps the result on ORT's (B +- 3e-5 there,
 *  rather than B exactly). */
mx::array FusedNormalize(const mx::array& x, const mx::array& mean, const mx::array& var,
                         const mx::array& scale, const mx::array& bias, double eps, mx::Stream s) {
  const mx::array inv_std = mx::reciprocal(mx::sqrt(mx::add(var, Scalar(eps, var.dtype()), s), s), s);
  const mx::array new_scale = mx::multiply(inv_std, scale, s);
  const mx::array new_bias = mx::subtract(bias, RoundedProduct(mean, new_scale, s), s);
  return mx::add(RoundedProduct(x, new_scale, s), new_bias, s);
}

/** `a` reshaped to [1, C, 1, ..., 1] for a rank-`rank` input (broadcasts over channels). */
mx::array PerChannel(const mx::array& a, int rank, mx::Stream s) {
  mx::Shape shape(rank, 1);
  shape[1] = -1;
  return mx::reshape(a, shape, s);
}

/** Fails unless `a` holds exactly `expected` values. */
void CheckSize(const OpContext& c, const mx::array& a, int64_t expected, const char* what) {
  if (static_cast<int64_t>(a.size()) != expected)
    c.Fail(std::string(what) + " has " + std::to_string(a.size()) + " values, expected " +
           std::to_string(expected));
}

// ---- BatchNormalization ------------------------------------------------------------------------

Claim ClaimBatchNorm(const NodeView& v) {
  const Node& n = v.node();
  const int ver = n.since_version;
  // ORT's CPU kernel runs training mode whenever a node has more than one output slot (opsets
  // before 14 have no other training switch), even with the extra outputs unnamed.
  if (v.num_outputs() > 1) return Claim::No("outputs beyond Y are training-mode outputs (batch statistics)");
  if (ver < 7 && n.AttrInt("is_test", 0) == 0)
    return Claim::No("is_test=0 is training mode (normalizes with the batch's statistics)");
  if (ver >= 14 && n.AttrInt("training_mode", 0) != 0)
    return Claim::No("training_mode=1 (normalizes with the batch's statistics)");
  const bool bf16 = ver >= 14;
  for (size_t i = 0; i < 5; ++i)
    if (std::string r = FloatInputReason(v, i, bf16); !r.empty()) return Claim::No(r);
  // Type groups: opsets 6-13 one type T; 14: X/scale/B T, mean/var U; 15: scale/B T1, mean/var T2.
  const ElemType tx = v.input_type(0), ts = v.input_type(1), tm = v.input_type(3);
  const bool params_ok = ver < 14    ? ts == tx && v.input_type(2) == tx && tm == tx && v.input_type(4) == tx
                         : ver == 14 ? ts == tx && v.input_type(2) == tx && v.input_type(4) == tm
                                     : v.input_type(2) == ts && v.input_type(4) == tm;
  if (!params_ok) return Claim::No("scale/B/mean/var types do not follow the schema's type constraints");
  if (v.output_type(0) != tx) return Claim::No("output type differs from the input type");
  if (auto rank = v.input_rank(0); rank && *rank < 2) return Claim::No("input rank is below 2");
  return Claim::Yes();
}

std::vector<mx::array> TranslateBatchNorm(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  if (rank < 2) c.Fail("X must have rank >= 2");
  // Float64 anywhere computes in float64 (the other values convert exactly), else float32.
  bool wide = false;
  for (size_t i = 0; i < 5; ++i) wide = wide || c.input(i).dtype() == mx::float64;
  const mx::Dtype acc = wide ? mx::float64 : mx::float32;

  // spatial=0 (opsets 6-8): one statistic per (C, D1, ..., Dk) element instead of per channel.
  const bool spatial = n.since_version >= 9 || n.AttrInt("spatial", 1) == 1;
  mx::Shape stat_shape(rank, 1);
  stat_shape[0] = 1;
  int64_t count = x.shape(1);
  if (spatial) {
    stat_shape[1] = x.shape(1);
  } else {
    for (int i = 1; i < rank; ++i) stat_shape[i] = x.shape(i);
    count = shape_util::Product(shape_util::Dims(x), 1, rank);
  }
  static const char* kNames[] = {"", "scale", "B", "mean", "var"};
  std::vector<mx::array> p;  // scale, B, mean, var
  for (size_t i = 1; i < 5; ++i) {
    CheckSize(c, c.input(i), count, kNames[i]);
    p.push_back(mx::astype(mx::reshape(c.input(i), stat_shape, s), acc, s));
  }
  const mx::array y =
      FusedNormalize(mx::astype(x, acc, s), p[2], p[3], p[0], p[1], n.AttrFloat("epsilon", 1e-5f), s);
  return {mx::astype(y, x.dtype(), s)};
}

// ---- InstanceNormalization ---------------------------------------------------------------------

Claim ClaimInstanceNorm(const NodeView& v) {
  // ORT's CPU kernel takes rank >= 3 only (N x C x D1 ... Dk).
  return ClaimFloatOp(v, v.node().since_version >= 22, 2, 3);
}

std::vector<mx::array> TranslateInstanceNorm(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  if (rank < 3) c.Fail("input must have rank >= 3");
  const int64_t channels = x.shape(1);
  CheckSize(c, c.input(1), channels, "scale");
  CheckSize(c, c.input(2), channels, "B");
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};

  const mx::Dtype acc = ComputeDtype(x.dtype());
  const int64_t w = static_cast<int64_t>(x.size()) / (x.shape(0) * channels);
  const mx::array xc = mx::astype(mx::reshape(x, {x.shape(0), static_cast<int>(channels), -1}, s), acc, s);
  const mx::array mean = RefinedMean(xc, {2}, w, s);
  const mx::array var = Variance(mx::subtract(xc, mean, s), {2}, w, s);
  const mx::array scale = PerChannel(mx::astype(c.input(1), acc, s), 3, s);
  const mx::array bias = PerChannel(mx::astype(c.input(2), acc, s), 3, s);
  const mx::array y = FusedNormalize(xc, mean, var, scale, bias, c.node.AttrFloat("epsilon", 1e-5f), s);
  return {mx::reshape(mx::astype(y, x.dtype(), s), x.shape(), s)};
}

// ---- GroupNormalization ------------------------------------------------------------------------
//
// Opset 18: scale and bias hold one value per group; opset 21: one per channel, and stage one
// (the normalization) runs in float32 (stash_type=1) whatever X's type is, stage two (scale and
// bias) in X's type. Opset 18 for float64 computes everything in float64.

Claim ClaimGroupNorm(const NodeView& v) {
  const Node& n = v.node();
  if (n.AttrInt("num_groups", 0) <= 0) return Claim::No("attribute num_groups is missing or not positive");
  if (n.since_version >= 21) {
    const int64_t stash = n.AttrInt("stash_type", 1);
    if (stash != 1) return Claim::No("attribute stash_type=" + std::to_string(stash) + " not supported");
  }
  Claim claim = ClaimFloatOp(v, true, 2, 2);
  if (!claim.ok) return claim;
  if (auto shape = v.input_shape(0);
      shape && (*shape)[1] >= 0 && (*shape)[1] % n.AttrInt("num_groups", 1) != 0)
    return Claim::No("the channel count is not divisible by num_groups");
  return claim;
}

std::vector<mx::array> TranslateGroupNorm(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  if (rank < 2) c.Fail("X must have rank >= 2");
  const int groups = static_cast<int>(n.AttrInt("num_groups", 1));
  const int channels = x.shape(1);
  if (channels % groups != 0) c.Fail("the channel count is not divisible by num_groups");
  const bool per_channel = n.since_version >= 21;
  CheckSize(c, c.input(1), per_channel ? channels : groups, "scale");
  CheckSize(c, c.input(2), per_channel ? channels : groups, "bias");
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};

  const mx::Dtype stage2 = ComputeDtype(x.dtype());
  const mx::Dtype stage1 = per_channel ? mx::float32 : stage2;
  const int64_t group_size = static_cast<int64_t>(x.size()) / (x.shape(0) * groups);
  const mx::array xg = mx::astype(mx::reshape(x, {x.shape(0), groups, -1}, s), stage1, s);
  const mx::array mean = RefinedMean(xg, {2}, group_size, s);
  const mx::array centered = mx::subtract(xg, mean, s);
  const mx::array var = Variance(centered, {2}, group_size, s);
  const double eps = n.AttrFloat("epsilon", 1e-5f);
  // The function body divides by the standard deviation (no reciprocal).
  mx::array normalized = mx::divide(centered, mx::sqrt(mx::add(var, Scalar(eps, stage1), s), s), s);
  normalized = mx::astype(normalized, stage2, s);
  if (per_channel) normalized = mx::reshape(normalized, {x.shape(0), channels, -1}, s);
  const mx::array scale = PerChannel(mx::astype(c.input(1), stage2, s), 3, s);
  const mx::array bias = PerChannel(mx::astype(c.input(2), stage2, s), 3, s);
  const mx::array y = mx::add(mx::multiply(scale, normalized, s), bias, s);
  return {mx::reshape(mx::astype(y, x.dtype(), s), x.shape(), s)};
}

// ---- LpNormalization ---------------------------------------------------------------------------
//
// y = x / ||x||_p along `axis`, 0 where the norm is 0 (ORT and the spec). The norm is formed
// directly, as ORT does: an overflowing sum of squares gives an infinite norm and zeros.

Claim ClaimLpNorm(const NodeView& v) {
  const int64_t p = v.node().AttrInt("p", 2);
  if (p != 1 && p != 2) return Claim::No("attribute p=" + std::to_string(p) + " (only 1 and 2 are defined)");
  Claim claim = ClaimFloatOp(v, v.node().since_version >= 22);
  if (!claim.ok) return claim;
  if (auto rank = v.input_rank(0)) {
    const int64_t axis = v.node().AttrInt("axis", -1);
    if (*rank == 0 || axis < -*rank || axis >= *rank) return Claim::No("axis is out of range");
  }
  return claim;
}

std::vector<mx::array> TranslateLpNorm(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int axis = NormAxis(c, c.node.AttrInt("axis", -1), x.ndim());
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};
  const mx::array xc = mx::astype(x, ComputeDtype(x.dtype()), s);
  const mx::Dtype d = xc.dtype();
  const mx::array norm = c.node.AttrInt("p", 2) == 1
                             ? AccurateSum(mx::abs(xc, s), {axis}, true, s)
                             : mx::sqrt(AccurateSum(mx::multiply(xc, xc, s), {axis}, true, s), s);
  const mx::array y = mx::where(mx::equal(norm, Scalar(0, d), s), Scalar(0, d), mx::divide(xc, norm, s), s);
  return {mx::astype(y, x.dtype(), s)};
}

// ---- LRN ---------------------------------------------------------------------------------------
//
// y[n, c, ...] = x[n, c, ...] / (bias + alpha / size * sum of x[n, i, ...]^2)^beta over the
// channels i in [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] that exist. ORT's kernel
// takes 4-D input only; the definition (and this translation) holds for any rank >= 3.

Claim ClaimLrn(const NodeView& v) {
  if (v.node().AttrInt("size", 0) <= 0) return Claim::No("attribute size is missing or not positive");
  return ClaimFloatOp(v, v.node().since_version >= 13, 0, 3);
}

std::vector<mx::array> TranslateLrn(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  if (x.ndim() < 3) c.Fail("input must have rank >= 3");
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};
  const int size = static_cast<int>(n.AttrInt("size", 1));
  const int channels = x.shape(1);
  const int before = (size - 1) / 2;
  const int after = size - 1 - before;
  const mx::array xc = mx::astype(x, ComputeDtype(x.dtype()), s);
  const mx::Dtype d = xc.dtype();

  // Window sums as a sum of shifted slices of the zero-padded squares. Offsets whose slice lies
  // wholly in the padding add nothing and are skipped (at most 2C - 1 slices remain).
  const mx::array sq = mx::pad(mx::multiply(xc, xc, s), {1}, {before}, {after}, Scalar(0, d), "constant", s);
  mx::Shape start(x.ndim(), 0), stop = x.shape();
  std::optional<mx::array> sum;
  for (int k = std::max(0, before - channels + 1); k <= std::min(size - 1, before + channels - 1); ++k) {
    start[1] = k;
    stop[1] = k + channels;
    const mx::array part = mx::slice(sq, start, stop, s);
    sum = sum ? mx::add(*sum, part, s) : part;
  }
  // ORT forms alpha / size in float; float64 keeps it in double.
  const double alpha = n.AttrFloat("alpha", 1e-4f);
  const double alpha_over_size = d == mx::float64 ? alpha / size : static_cast<float>(alpha / size);
  const mx::array base =
      mx::add(Scalar(n.AttrFloat("bias", 1.0f), d), mx::multiply(Scalar(alpha_over_size, d), *sum, s), s);
  const mx::array y = mx::multiply(xc, mx::power(base, Scalar(-n.AttrFloat("beta", 0.75f), d), s), s);
  return {mx::astype(y, x.dtype(), s)};
}

// ---- MeanVarianceNormalization -----------------------------------------------------------------
//
// y = (x - E[x]) / sqrt(E[(x - E[x])^2]) over `axes` (default [0, 2, 3]), as ORT's CPU kernel and
// the spec's formula compute it: no epsilon, so a constant slice gives 0 / 0 = NaN there. (The
// ONNX function body adds 1e-9 to the standard deviation and gives 0.)

std::vector<int64_t> MvnAxes(const Node& n) {
  return n.AttrInts("axes").value_or(std::vector<int64_t>{0, 2, 3});
}

Claim ClaimMvn(const NodeView& v) {
  Claim claim = ClaimFloatOp(v, v.node().since_version >= 13);
  if (!claim.ok) return claim;
  if (auto rank = v.input_rank(0))
    for (int64_t a : MvnAxes(v.node()))
      if (a < -*rank || a >= *rank)
        return Claim::No("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(*rank));
  return claim;
}

std::vector<mx::array> TranslateMvn(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  std::vector<int> axes;
  int64_t count = 1;
  for (int64_t a : MvnAxes(c.node)) axes.push_back(NormAxis(c, a, x.ndim()));
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  for (int a : axes) count *= x.shape(a);
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};
  const mx::array xc = mx::astype(x, ComputeDtype(x.dtype()), s);
  const mx::array centered = mx::subtract(xc, RefinedMean(xc, axes, count, s), s);
  const mx::array y = mx::divide(centered, mx::sqrt(Variance(centered, axes, count, s), s), s);
  return {mx::astype(y, x.dtype(), s)};
}

}  // namespace

void RegisterImageNormalizationOps(OpRegistry& r) {
  // BatchNormalization 6 (is_test), 7-8 (spatial), 9-13, 14 (U stats), 15 (T1/T2); 1 (legacy
  // consumed_inputs) is not registered.
  r.Add({"", "BatchNormalization", 6, 15, ClaimBatchNorm, TranslateBatchNorm});
  r.Add({"", "InstanceNormalization", 6, 22, ClaimInstanceNorm, TranslateInstanceNorm});
  r.Add({"", "GroupNormalization", 18, 21, ClaimGroupNorm, TranslateGroupNorm});
  r.Add({"", "LpNormalization", 1, 22, ClaimLpNorm, TranslateLpNorm});
  r.Add({"", "LRN", 1, 13, ClaimLrn, TranslateLrn});
  r.Add({"", "MeanVarianceNormalization", 9, 13, ClaimMvn, TranslateMvn});
}

}  // namespace mlx_ep
