// Op family: Softmax, LogSoftmax, LayerNormalization, RMSNormalization.
//
//  - Softmax/LogSoftmax before opset 13 coerce the input to 2-D at `axis` (default 1) and
//    normalize over the flattened trailing part; from 13 they normalize over one axis (default -1).
//  - float16/bfloat16 compute in float32 and round once, like ORT's CPU kernels. Exception:
//    float16 Softmax from opset 13 follows its ONNX function body inline (Max, Sub, Exp,
//    ReduceSum, Div, rounded to float16 after each step as ONNX and ORT's expansion of it do;
//    ReduceSum sums in float32 and rounds once, as our ReduceSum does). It used to be declined so
//    that ORT expanded the body: the expanded nodes landed in partitions of their own (ORT's
//    second capability pass), which split a float16 BERT into 25 partitions on the H200.
//  - float64: MLX's float64 exp runs at float32 precision, so exp is composed as pow(e, x), which
//    is exact to double rounding.
//  - LayerNormalization (17): normalizes over dims [axis, rank); Scale/B must hold exactly
//    prod(shape[axis:]) values (ORT's rule; they are read flat). Composed in float32 (float64 for
//    float64 X) with accurate sums; Mean and InvStdDev come from the same computation. On GPUs,
//    when neither statistic is used, mx::fast::layer_norm on float32 values (FusedLayerNorm), or
//    with ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 on CUDA one kernel of the EP's (normalization_cuda.h).
//  - RMSNormalization (23): Y = X / sqrt(mean(X^2 over [axis, rank)) + epsilon) * Scale, in float32
//    (float64 for float64 X) and rounded once, like ORT's kernel (LayerNorm's simplified path:
//    divide, then multiply). Scale broadcasts against X (numpy rules, as ORT accepts it: [C],
//    [1, C], X.shape[axis:], ...); a Scale that would widen Y is an error. On GPUs, when Scale
//    holds one value per position of X.shape[axis:], mx::fast::rms_norm on float32 values (the
//    EP's kernel on CUDA with ONNXRUNTIME_EP_MLX_NORM_KERNEL=1, normalization_cuda.h).
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "common/env.h"
#include "mlx/fast.h"
#include "ops/claim_util.h"
#include "ops/fused_gpu_internal.h"
#include "ops/normalization_cpu.h"
#include "ops/normalization_cuda.h"
#include "ops/primitive_name.h"
#include "ops/reduction_internal.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"
#include "ops/softmax_cuda.h"
#include "ops/unary_cpu.h"
#include "ops/unary_internal.h"

namespace mlx_ep {
namespace {

bool IsLowFloat(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }

// float16 Softmax-13+ is declined: ONNX defines it by its function body (ReduceMax, Sub, Exp,
// ReduceSum, Div), every step rounded to float16, which is what the ONNX reference computes and
// what the backend tests' expected data hold. The fused float32 softmax below rounds once, like
// ORT (its CPU EP has no float16 Softmax kernel and runs the expanded body in float32). The two
// differ by up to ~10 float16 ulps (within 1e-3 absolute, not always within 1e-3 relative), and a
// following MatMul (attention's P @ V) turns 1-ulp differences of the probabilities into 2-ulp
// ones (test_attention_4d_causal_fp16_expanded: 1.2e-3 rel). Declined, ORT expands the function
// body and MLX runs its nodes one by one, each exactly as ORT computes that node; the result then
// follows the ONNX definition (bit-exact with the reference) rather than ORT's float32 body.
/** e^x, exact to the dtype's rounding also for float64 (where mx::exp is float32-accurate). On
 *  MLX's CPU backend unary::Exp is also 2x faster and 20x more accurate than mx::exp; on GPUs
 *  mx::exp is used (softmax's shifted x <= 0 needs no overflow fix-up). */
mx::array Exp(const mx::array& x, mx::Stream s) {
  if (x.dtype() == mx::float64 || RuntimeDevice() == mx::Device(mx::Device::cpu)) return unary::Exp(x, s);
  return mx::exp(x, s);
}

/** The normalized axes of a (Log)Softmax node for input rank `rank`. */
std::vector<int> SoftmaxAxes(const OpContext& c, int rank) {
  const bool legacy = c.node.since_version < 13;
  int64_t axis = c.node.AttrInt("axis", legacy ? 1 : -1);
  if (axis < -rank || axis >= rank)
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  std::vector<int> axes;
  for (int i = static_cast<int>(axis); i < (legacy ? rank : axis + 1); ++i) axes.push_back(i);
  return axes;
}

Claim ClaimSoftmax(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsFloating(t)) return Claim::No(TypeReason(v, 0));
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

/** float16 Softmax-13+ as its ONNX function body, each step rounded to float16 (see the top of
 *  the file); `red` holds the one reduced axis of `in`, `shape` the output's. */
mx::array SoftmaxFunctionBody(const mx::array& in, const std::vector<int>& red, const mx::Shape& shape,
                              mx::Stream s) {
  const mx::array shifted = mx::subtract(in, mx::max(in, red, true, s), s);
  const mx::array e = mx::astype(Exp(mx::astype(shifted, mx::float32, s), s), mx::float16, s);
  const mx::array sum = mx::astype(AccurateSum(mx::astype(e, mx::float32, s), red, true, s), mx::float16, s);
  return mx::reshape(mx::divide(e, sum, s), shape, s);
}

template <bool kLog>
std::vector<mx::array> TranslateSoftmax(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  const std::vector<int> axes = SoftmaxAxes(c, rank);
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};

  // Legacy coercion to 2-D: the normalized axes are the trailing ones; flatten them into one.
  mx::array in = x;
  std::vector<int> red = axes;
  if (axes.size() > 1) {
    mx::Shape flat(x.shape().begin(), x.shape().begin() + axes.front());
    flat.push_back(-1);
    in = mx::reshape(x, flat, s);
    red = {static_cast<int>(flat.size()) - 1};
  }
  const mx::Dtype dt = x.dtype();
  const bool float16_body = !kLog && dt == mx::float16 && c.node.since_version >= 13;
  // On MLX's CUDA backend (unless ONNXRUNTIME_EP_MLX_SOFTMAX_KERNEL=0): either form below as one
  // kernel a node (softmax_cuda.h), over the last axis.
  if (red.size() == 1 && red[0] == static_cast<int>(in.ndim()) - 1)
    if (std::optional<mx::array> y = RowSoftmaxByKernel({in, kLog, float16_body}, s))
      return {axes.size() > 1 ? mx::reshape(*y, x.shape(), s) : *y};
  if (float16_body) return {SoftmaxFunctionBody(in, red, x.shape(), s)};
  mx::array y = [&]() -> mx::array {
    // Composed rather than mx::softmax: its CPU kernel sums exp() in one float32 chain, off by
    // ~4e-5 rel for vocabulary-sized rows, where ORT stays at ~1e-6.
    const mx::array xc = IsLowFloat(dt) ? mx::astype(in, mx::float32, s) : in;
    // On MLX's CPU device over the last axis: those steps as one primitive (unary_cpu.h).
    if (red.size() == 1 && red[0] == static_cast<int>(xc.ndim()) - 1 &&
        RuntimeDevice() == mx::Device(mx::Device::cpu))
      if (auto fused = SoftmaxOnCpu(xc, kLog, s)) return *fused;
    const mx::array shifted = mx::subtract(xc, mx::max(xc, red, true, s), s);
    const mx::array e = Exp(shifted, s);
    const mx::array sum = AccurateSum(e, red, true, s);
    return kLog ? mx::subtract(shifted, mx::log(sum, s), s) : mx::divide(e, sum, s);
  }();
  if (y.dtype() != dt) y = mx::astype(y, dt, s);
  if (axes.size() > 1) y = mx::reshape(y, x.shape(), s);
  return {y};
}

// ---- LayerNormalization ------------------------------------------------------------------------

// On GPUs (fused_gpu_internal.h) the normalization is mx::fast::layer_norm / rms_norm over the
// flattened normalized axes [rows, n], on float32 values rounded once to T (one kernel instead of
// ~11). MLX's CUDA kernels (mlx/backend/cuda/layer_norm.cu, rms_norm.cu) accumulate in float32:
// each thread sums its N_READS-strided share of the row, then a warp tree and a block reduction
// add the partial sums (blocked, not one chain: error ~log2(n) ulps instead of MLX CPU's ~n), and
// layer_norm takes two passes over the row (the mean, then sum((x - mean)^2)), so the variance
// has no cancellation; its mean's rounding does move a row whose mean is large against its spread,
// so float32 rows are recentered first (FastLayerNorm, fused_gpu_internal.h). What they do in T
// (norm rounded to T, times w, plus b, in T) is exact here because T is float32: the input is
// widened first, as ORT computes (float16 in float).
// rms_norm is one pass (sum of x^2, reduced the same way).
mx::array FusedLayerNorm(const mx::array& x2d, const mx::array& w, const std::optional<mx::array>& b,
                         float eps, mx::Stream s) {
  const mx::Dtype dt = x2d.dtype();
  auto f32 = [&](const mx::array& a) { return mx::astype(a, mx::float32, s); };
  std::optional<mx::array> bf;
  if (b) bf = f32(*b);
  return mx::astype(FastLayerNorm(f32(x2d), f32(w), bf, eps, /*recenter=*/dt == mx::float32, s), dt, s);
}

Claim ClaimLayerNorm(const NodeView& v) {
  const Node& n = v.node();
  const ElemType t = v.input_type(0);
  if (!IsFloating(t)) return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t || (v.has_input(2) && v.input_type(2) != t))
    return Claim::No("Scale/B type differs from X");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  const int64_t stash = n.AttrInt("stash_type", 1);
  if (stash != 1) return Claim::No("attribute stash_type=" + std::to_string(stash) + " not supported");
  for (size_t k = 1; k < 3; ++k)
    if (v.has_output(k) && !IsOneOf(v.output_type(k), {ElemType::kFloat, ElemType::kBFloat16}))
      return Claim::No("output " + std::to_string(k) + " has type " + ElemName(v.output_type(k)));
  return Claim::Yes();
}

/** x's two operands [rows, n] when x (the norm's input) is an Add of two arrays of x's shape and
 *  type that only this norm reads (post-LN BERT's residual sum), for the norm kernel's skip input
 *  with the sum rounded to T as the Add rounds it; opt-in (ONNXRUNTIME_EP_MLX_NORM_ADD=1). */
std::optional<std::pair<mx::array, mx::array>> ResidualAddends(const OpContext& c, const mx::array& x,
                                                               const mx::Shape& flat, mx::Stream s) {
  static const bool enabled = EnvFlag(env::kNormAdd);
  if (!enabled || c.readers(0) != 1 || !IsPrimitive(x, "Add") || x.inputs().size() != 2) return std::nullopt;
  const mx::array &a = x.inputs()[0], &b = x.inputs()[1];
  if (a.shape() != x.shape() || b.shape() != x.shape() || a.dtype() != x.dtype() || b.dtype() != x.dtype())
    return std::nullopt;
  // A broadcast operand (a bias row) would be copied whole for the kernel: the Add is cheaper.
  if (IsPrimitive(a, "Broadcast") || IsPrimitive(b, "Broadcast")) return std::nullopt;
  return std::make_pair(mx::reshape(a, flat, s), mx::reshape(b, flat, s));
}

std::vector<mx::array> TranslateLayerNorm(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  int64_t axis = n.AttrInt("axis", -1);
  if (axis < -rank || axis >= rank)
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  const float eps = n.AttrFloat("epsilon", 1e-5f);
  const mx::Dtype dt = x.dtype();

  int64_t norm_size = 1;
  for (int i = static_cast<int>(axis); i < rank; ++i) norm_size *= x.shape(i);
  // Scale and B match X.shape[axis:] or broadcast to it (ORT's rule), flattened to norm_size.
  const mx::Shape tail(x.shape().begin() + axis, x.shape().end());
  auto per_element = [&](const mx::array& p) {
    bool fits = p.ndim() <= x.ndim();  // dims before axis, if any, must be 1
    for (size_t k = 1; fits && k <= p.ndim(); ++k)
      fits = p.shape(-k) == 1 || (k <= tail.size() && p.shape(-k) == tail[tail.size() - k]);
    if (!fits) c.Fail("Scale and (optional) bias must match X.shape[axis:] or be NumPy-broadcastable to it");
    const mx::array q = p.ndim() > tail.size()
                            ? mx::reshape(p, mx::Shape(p.shape().end() - tail.size(), p.shape().end()), s)
                            : p;
    return q.size() == static_cast<size_t>(norm_size) ? q : mx::broadcast_to(q, tail, s);
  };
  const mx::array scale = per_element(c.input(1));
  std::optional<mx::array> bias;
  if (c.has_input(2)) bias = per_element(c.input(2));

  const bool want_mean = c.num_outputs() > 1 && !n.outputs[1].empty();
  const bool want_inv = c.num_outputs() > 2 && !n.outputs[2].empty();
  mx::Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
  stat_shape.resize(rank, 1);
  mx::Shape flat(x.shape().begin(), x.shape().begin() + axis);
  flat.push_back(static_cast<int>(norm_size));

  std::vector<mx::array> outs;
  if (x.size() == 0) {
    // Nothing to normalize; statistics over zero values are 0/0 = NaN in ORT.
    outs.push_back(mx::astype(x, dt, s));
    for (size_t k = 1; k < c.num_outputs(); ++k) {
      const mx::Dtype st = n.outputs[k].empty() ? mx::float32 : c.output_dtype(k);
      outs.push_back(mx::full(stat_shape, mx::array(NAN, st), st, s));
    }
    return outs;
  }

  const mx::array xf = mx::reshape(x, flat, s);
  const mx::array w = mx::reshape(scale, {static_cast<int>(norm_size)}, s);
  std::optional<mx::array> b;
  if (bias) b = mx::reshape(*bias, {static_cast<int>(norm_size)}, s);

  if (!want_mean && !want_inv) {  // where wanted, one kernel of the EP's (normalization_cuda.h)
    const std::optional<std::pair<mx::array, mx::array>> addends = ResidualAddends(c, x, flat, s);
    const mx::array& first = addends ? addends->first : xf;
    const std::optional<mx::array> skip = addends ? std::optional<mx::array>(addends->second) : std::nullopt;
    if (auto r = RowNormByKernel(
            {first, skip, std::nullopt, w, b, eps, false, dt, false, addends.has_value()}, s)) {
      outs.push_back(mx::reshape((*r)[0], x.shape(), s));
      if (c.num_outputs() > 1) outs.push_back(mx::zeros(stat_shape, mx::float32, s));
      return outs;
    }
  }
  if (!want_mean && !want_inv && dt != mx::float64 && UseFusedGpuPaths()) {
    outs.push_back(mx::reshape(FusedLayerNorm(xf, w, b, eps, s), x.shape(), s));
    if (c.num_outputs() > 1) outs.push_back(mx::zeros(stat_shape, mx::float32, s));
    return outs;
  }
  if (!want_mean && !want_inv && dt != mx::float64) {  // MLX's CPU device: the EP's primitive
    auto f32 = [&](const mx::array& a) { return mx::astype(a, mx::float32, s); };
    std::optional<mx::array> bf;
    if (b) bf = f32(*b);
    if (auto y = RowNormOnCpu(f32(xf), f32(w), bf, eps, /*simplified=*/false, s)) {
      outs.push_back(mx::reshape(mx::astype(*y, dt, s), x.shape(), s));
      if (c.num_outputs() > 1) outs.push_back(mx::zeros(stat_shape, mx::float32, s));
      return outs;
    }
  }
  // Composed in float32 (float64 for float64 X, like ORT). mlx::fast::layer_norm is not used on
  // MLX's CPU backend: there it is ~10x less accurate than ORT (one-chain float32 sums), which
  // breaks 1e-5 parity for rows with a large mean. Here the mean gets one refinement step
  // (mean += mean(x - mean)), which removes the rounding of the first sum.
  const mx::Dtype acc = dt == mx::float64 ? mx::float64 : mx::float32;
  const mx::array xc = mx::astype(xf, acc, s);
  const mx::array inv_n = mx::array(1.0 / static_cast<double>(norm_size), acc);
  const std::vector<int> last = {static_cast<int>(flat.size()) - 1};
  mx::array mean = mx::multiply(AccurateSum(xc, last, true, s), inv_n, s);
  mean = mx::add(mean, mx::multiply(AccurateSum(mx::subtract(xc, mean, s), last, true, s), inv_n, s), s);
  const mx::array centered = mx::subtract(xc, mean, s);
  const mx::array var =
      mx::multiply(AccurateSum(mx::multiply(centered, centered, s), last, true, s), inv_n, s);
  const mx::array stddev = mx::sqrt(mx::add(var, mx::array(eps, acc), s), s);
  mx::array y = mx::multiply(mx::divide(centered, stddev, s), mx::astype(w, acc, s), s);
  if (b) y = mx::add(y, mx::astype(*b, acc, s), s);
  outs.push_back(mx::reshape(mx::astype(y, dt, s), x.shape(), s));

  auto stat = [&](const mx::array& v, size_t k) -> mx::array {
    return mx::reshape(mx::astype(v, c.output_dtype(k), s), stat_shape, s);
  };
  if (c.num_outputs() > 1) outs.push_back(want_mean ? stat(mean, 1) : mx::zeros(stat_shape, mx::float32, s));
  if (c.num_outputs() > 2 && want_inv) outs.push_back(stat(mx::divide(mx::array(1.0, acc), stddev, s), 2));
  return outs;
}

// ---- RMSNormalization --------------------------------------------------------------------------

Claim ClaimRmsNorm(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsFloating(t)) return Claim::No(TypeReason(v, 0));
  if (!v.has_input(1) || v.input_type(1) != t) return Claim::No("Scale type differs from X");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  const int64_t stash = v.node().AttrInt("stash_type", 1);
  if (stash != 1) return Claim::No("attribute stash_type=" + std::to_string(stash) + " not supported");
  return Claim::Yes();
}

/** RMS normalization over [axis, rank) of x flattened to [rows, n], when Scale holds one value
 *  per position of X.shape[axis:] (leading dims 1): mx::fast::rms_norm on float32 values when
 *  `fused` (the GPU paths, see FusedLayerNorm), else the EP's CPU primitive (RowNormOnCpu, nullopt
 *  off MLX's CPU device); rounded once to X's type. nullopt too for a Scale that broadcasts along
 *  the normalized axes, or varies along the others: that stays composed. */
std::optional<mx::array> RowRmsNorm(const mx::array& x, const mx::array& scale, int axis, float eps,
                                    bool fused, mx::Stream s) {
  const mx::Shape tail(x.shape().begin() + axis, x.shape().end());
  bool per_element = scale.ndim() >= tail.size() && scale.ndim() <= x.ndim();
  for (size_t k = 1; per_element && k <= scale.ndim(); ++k)
    per_element = k <= tail.size() ? scale.shape(-k) == tail[tail.size() - k] : scale.shape(-k) == 1;
  if (!per_element) return std::nullopt;
  int n = 1;
  for (int d : tail) n *= d;
  mx::Shape flat(x.shape().begin(), x.shape().begin() + axis);  // x's own shape when axis is the last
  flat.push_back(n);
  if (fused)  // where wanted, one kernel of the EP's (normalization_cuda.h)
    if (auto r = RowNormByKernel({mx::reshape(x, flat, s), std::nullopt, std::nullopt,
                                  mx::reshape(scale, {n}, s), std::nullopt, eps, true, x.dtype(), false},
                                 s))
      return mx::reshape((*r)[0], x.shape(), s);
  const mx::array xf = mx::astype(mx::reshape(x, flat, s), mx::float32, s);
  const mx::array w = mx::astype(mx::reshape(scale, {n}, s), mx::float32, s);
  const std::optional<mx::array> y = fused ? mx::fast::rms_norm(xf, w, eps, s)
                                           : RowNormOnCpu(xf, w, std::nullopt, eps, /*simplified=*/true, s);
  if (!y) return std::nullopt;
  return mx::reshape(mx::astype(*y, x.dtype(), s), x.shape(), s);
}

std::vector<mx::array> TranslateRmsNorm(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::array& scale = c.input(1);
  const int rank = static_cast<int>(x.ndim());
  int64_t axis = c.node.AttrInt("axis", -1);
  if (axis < -rank || axis >= rank)
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  if (!shape_util::BroadcastsTo(scale.shape(), x.shape())) c.Fail("Scale is not broadcastable to X's shape");
  std::vector<int> axes;
  for (int i = static_cast<int>(axis); i < rank; ++i) axes.push_back(i);
  int64_t norm_size = 1;
  for (int i : axes) norm_size *= x.shape(i);
  if (norm_size == 0) c.Fail("X.shape[axis:] holds no values");  // ORT's error too
  const mx::Dtype dt = x.dtype();
  if (x.size() == 0) return {mx::astype(x, dt, s)};
  // mx::fast::rms_norm is not used on MLX's CPU backend (its CPU kernel sums in one float32 chain):
  // there the EP's primitive (normalization_cpu.h), else the composed form below.
  if (dt != mx::float64)
    if (auto y = RowRmsNorm(x, scale, static_cast<int>(axis), c.node.AttrFloat("epsilon", 1e-5f),
                            UseFusedGpuPaths(), s))
      return {*y};
  const mx::Dtype acc = dt == mx::float64 ? mx::float64 : mx::float32;
  const mx::array xc = mx::astype(x, acc, s);
  const mx::array mean_sq = mx::multiply(AccurateSum(mx::multiply(xc, xc, s), axes, true, s),
                                         mx::array(1.0 / static_cast<double>(norm_size), acc), s);
  const float eps = c.node.AttrFloat("epsilon", 1e-5f);
  const mx::array rms = mx::sqrt(mx::add(mean_sq, mx::array(eps, acc), s), s);
  const mx::array y = mx::multiply(mx::divide(xc, rms, s), mx::astype(scale, acc, s), s);
  return {mx::astype(y, dt, s)};
}

}  // namespace

void RegisterNormalizationOps(OpRegistry& r) {
  r.Add({"", "Softmax", 1, 13, ClaimSoftmax, TranslateSoftmax<false>});
  r.Add({"", "LogSoftmax", 1, 13, ClaimSoftmax, TranslateSoftmax<true>});
  r.Add({"", "LayerNormalization", 17, 17, ClaimLayerNorm, TranslateLayerNorm});
  r.Add({"", "RMSNormalization", 23, 23, ClaimRmsNorm, TranslateRmsNorm});
}

}  // namespace mlx_ep
