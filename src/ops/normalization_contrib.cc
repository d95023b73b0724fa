// Op family: ONNX Runtime's contrib normalizations, with the semantics of ORT 1.31's CPU kernels
// (core/providers/cpu/nn/layer_norm_impl.cc, contrib_ops/cpu/skip_layer_norm.cc):
//
//  - SkipLayerNormalization, SkipSimplifiedLayerNormalization (com.microsoft 1): s = input + skip
//    (+ bias), normalized over the last axis, times gamma (+ beta; the simplified form divides by
//    sqrt(mean(s^2) + epsilon) and has no beta). input is 2-D or 3-D; skip has input's shape, or
//    [S, H] / [1, S, H] against a [B, S, H] input (ORT's other form, a skip batch neither 1 nor B,
//    wraps around rows and is declined). gamma, beta, bias are [H]. Outputs: output, mean and
//    inv_std_var (float32, input's shape with the last dim 1) and input_skip_bias_sum (s rounded
//    to T). SkipSimplified's `mean` output is declined: ORT's kernel computes no mean there.
//  - SimplifiedLayerNormalization (ai.onnx 1+: ORT registers this contrib op in the ONNX domain):
//    Y = X / sqrt(mean(X^2 over [axis, rank)) + epsilon) * scale; inv_std_var output (float32).
//  - LayerNormalization (ai.onnx 1-16, ORT's contrib form before ONNX's opset 17): as opset 17.
//    For both, X (T) and scale/B (V) may differ in float type; Y is V, computed in float32 (float64
//    when both are float64) and rounded once. Scale (and B) broadcast against X numpy-style, as ORT 1.31
//    accepts them ([H], [1, H], X.shape[axis:], [B, 1, H], ...); a scale that would widen Y is an error
//    (ORT's too).
//
// float16/bfloat16 compute in float32 and round once (ORT's float16 kernels convert to float and
// accumulate in float; ORT has no bfloat16 kernel, the same rule is applied); float32 computes in
// float32, float64 (LayerNormalization/SimplifiedLayerNormalization only) in float64.
// On GPUs, where the normalized axis is the last one, scale/bias hold one value per position of it
// and no statistic output is used, the translation is mx::fast::layer_norm / mx::fast::rms_norm
// on float32 values, rounded once afterwards (float32 rows recentered first, FastLayerNorm;
// ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS switches it, as for the ai.onnx forms); with
// ONNXRUNTIME_EP_MLX_NORM_KERNEL=1 on MLX's CUDA backend one kernel of the EP's instead
// (normalization_cuda.h: sum, norm and roundings in one launch; a skip of input's shape only). On
// MLX's CPU backend (whose fused kernels are not accurate enough) the EP's row-normalization
// primitive (normalization_cpu.h) in that case.
// Otherwise it is composed with accurate sums (the mean refined once, as in normalization.cc),
// which also gives the statistics.
#include <cmath>

#include "ops/claim_util.h"
#include "ops/fused_gpu_internal.h"
#include "ops/normalization_cpu.h"
#include "ops/normalization_cuda.h"
#include "ops/reduction_internal.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

constexpr const char* kMsDomain = "com.microsoft";

/** True when `p` holds one value per position of the last axis of a [..., n] array (any leading
 *  dims are 1), so that it can be flattened to the 1-D weight the fused MLX kernels take. */
bool IsLastAxisVector(const mx::array& p, int n, int x_rank) {
  if (p.ndim() == 0 || static_cast<int>(p.ndim()) > x_rank || p.shape(-1) != n) return false;
  return static_cast<int>(p.size()) == n;
}

/** The statistics of a normalization, in the compute dtype, keepdims over the normalized axes. */
struct Stats {
  mx::array mean;  // zeros for the simplified form
  mx::array std;   // sqrt(var + eps), or sqrt(mean(x^2) + eps) for the simplified form
};

/** Mean and standard deviation of `x` (compute dtype) over `axes`, with accurate sums. */
Stats ComputeStats(const mx::array& x, const std::vector<int>& axes, float eps, bool simplified,
                   mx::Stream s) {
  int64_t n = 1;
  for (int a : axes) n *= x.shape(a);
  const mx::Dtype acc = x.dtype();
  const mx::array inv_n = mx::array(1.0 / static_cast<double>(n), acc);
  if (simplified) {
    const mx::array mean_sq = mx::multiply(AccurateSum(mx::multiply(x, x, s), axes, true, s), inv_n, s);
    return {mx::zeros_like(mean_sq, s), mx::sqrt(mx::add(mean_sq, mx::array(eps, acc), s), s)};
  }
  // One refinement step (mean += mean(x - mean)) removes the rounding of the first sum.
  mx::array mean = mx::multiply(AccurateSum(x, axes, true, s), inv_n, s);
  mean = mx::add(mean, mx::multiply(AccurateSum(mx::subtract(x, mean, s), axes, true, s), inv_n, s), s);
  const mx::array centered = mx::subtract(x, mean, s);
  const mx::array var =
      mx::multiply(AccurateSum(mx::multiply(centered, centered, s), axes, true, s), inv_n, s);
  return {mean, mx::sqrt(mx::add(var, mx::array(eps, acc), s), s)};
}

/** What a normalization produced: y in the compute dtype and, when asked for, the statistics. */
struct Normalized {
  mx::array y;
  std::optional<Stats> stats;
};

/** (x - mean) / std * scale + bias over [axis, rank) of `x` (compute dtype); `scale` and `bias`
 *  (compute dtype) broadcast against x. Fused MLX kernels where they apply (see the top);
 *  `float32_input`: the node's input is float32 (FastLayerNorm recenters its rows then). */
Normalized Normalize(const mx::array& x, int axis, const mx::array& scale,
                     const std::optional<mx::array>& bias, float eps, bool simplified, bool want_stats,
                     bool float32_input, mx::Stream s) {
  const int rank = static_cast<int>(x.ndim());
  const int n = x.shape(-1);
  // Not on MLX's CPU backend: there the fused kernels fall back to one-chain float32 reductions,
  // measured ~10x further from float64 truth than ORT (LayerNorm, H = 4096: 2x the 1e-5 parity
  // tolerance from ORT, the composed form 0.4x).
  const bool fused = UseFusedGpuPaths() && !want_stats && x.dtype() == mx::float32 && axis == rank - 1 &&
                     IsLastAxisVector(scale, n, rank) && (!bias || IsLastAxisVector(*bias, n, rank));
  if (fused) {
    const mx::array w = mx::reshape(scale, {n}, s);
    if (simplified) return {mx::fast::rms_norm(x, w, eps, s), std::nullopt};
    std::optional<mx::array> b;
    if (bias) b = mx::reshape(*bias, {n}, s);
    return {FastLayerNorm(x, w, b, eps, float32_input, s), std::nullopt};
  }
  if (!want_stats && x.dtype() == mx::float32 && axis == rank - 1 && IsLastAxisVector(scale, n, rank) &&
      (!bias || IsLastAxisVector(*bias, n, rank))) {
    std::optional<mx::array> b;
    if (bias) b = mx::reshape(*bias, {n}, s);
    if (auto y = RowNormOnCpu(x, mx::reshape(scale, {n}, s), b, eps, simplified, s))
      return {*y, std::nullopt};
  }
  std::vector<int> axes;
  for (int i = axis; i < rank; ++i) axes.push_back(i);
  Stats st = ComputeStats(x, axes, eps, simplified, s);
  // ORT's order: (x - mean) / std * scale + bias.
  mx::array y = mx::multiply(mx::divide(simplified ? x : mx::subtract(x, st.mean, s), st.std, s), scale, s);
  if (bias) y = mx::add(y, *bias, s);
  return {y, std::move(st)};
}

/** The dtype a normalization of `dt` computes in. */
mx::Dtype AccDtype(mx::Dtype dt) { return dt == mx::float64 ? mx::float64 : mx::float32; }

/** Checks the types shared by every op here: X (input 0) a float of `types`, the inputs listed in
 *  `same` of X's type, output 0 of `y_type` (default X's type), the statistic outputs `stats` float32. */
Claim ClaimTypes(const NodeView& v, std::initializer_list<ElemType> types, std::initializer_list<size_t> same,
                 std::initializer_list<size_t> stats, std::optional<ElemType> y_type = std::nullopt) {
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, types)) return Claim::No(TypeReason(v, 0));
  if (!DeviceSupports(t)) return Claim::No(TypeReason(v, 0, "not supported on the MLX device"));
  for (size_t i : same)
    if (v.has_input(i) && v.input_type(i) != t)
      return Claim::No("input " + std::to_string(i) + " has type " + ElemName(v.input_type(i)) + ", X has " +
                       ElemName(t));
  if (v.output_type(0) != y_type.value_or(t)) return Claim::No("output type differs from the input type");
  for (size_t k : stats)
    if (v.has_output(k) && v.output_type(k) != ElemType::kFloat)
      return Claim::No("output " + std::to_string(k) + " has type " + ElemName(v.output_type(k)) +
                       " (only float statistics are supported)");
  return Claim::Yes();
}

// ---- LayerNormalization (ai.onnx 1-16), SimplifiedLayerNormalization ---------------------------

template <bool kSimplified>
Claim ClaimLayerNorm(const NodeView& v) {
  const int64_t stash = v.node().AttrInt("stash_type", 1);
  if (stash != 1) return Claim::No("attribute stash_type=" + std::to_string(stash) + " not supported");
  if (!v.has_input(1)) return Claim::No("scale is absent");
  if (kSimplified && v.has_input(2)) return Claim::No("SimplifiedLayerNormalization takes no bias");
  if (kSimplified && v.has_output(1)) {
    // ORT's shape inference gives inv_std_var X's shape with only dim `axis` set to 1 (its kernel
    // sets every dim from axis on): the output would contradict the shape ORT expects.
    const auto rank = v.input_rank(0);
    const int64_t axis = v.node().AttrInt("axis", -1);
    if (!rank || (axis != -1 && axis != *rank - 1))
      return Claim::No(
          "output inv_std_var with axis before the last (ORT's shape inference disagrees "
          "with its kernel there)");
  }
  // X is T, scale (and B) and Y are V (ORT computes in float32, float64 when both are float64).
  const ElemType t = v.input_type(0), w = v.input_type(1);
  if (!IsOneOf(w, kFloatTypes)) return Claim::No(TypeReason(v, 1));
  if ((t == ElemType::kDouble) != (w == ElemType::kDouble))
    return Claim::No("X and scale mix float64 with another float type");
  if (!DeviceSupports(w)) return Claim::No(TypeReason(v, 1, "not supported on the MLX device"));
  if (v.output_type(0) != w) return Claim::No("output type differs from scale's type");
  if (kSimplified) return ClaimTypes(v, kFloatTypes, {}, {1}, w);
  if (v.has_input(2) && v.input_type(2) != w) return Claim::No("B type differs from scale's type");
  return ClaimTypes(v, kFloatTypes, {}, {1, 2}, w);
}

template <bool kSimplified>
std::vector<mx::array> TranslateLayerNorm(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  int64_t axis = c.node.AttrInt("axis", -1);
  if (axis < -rank || axis >= rank)
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  const mx::array& scale = c.input(1);
  std::optional<mx::array> bias;
  if (!kSimplified && c.has_input(2)) bias = c.input(2);
  if (!shape_util::BroadcastsTo(scale.shape(), x.shape()) ||
      (bias && !shape_util::BroadcastsTo(bias->shape(), x.shape())))
    c.Fail("scale and bias must be broadcastable to X's shape");

  // Statistic output slots: Mean and InvStdDev (1, 2), or inv_std_var (1) for the simplified form.
  const size_t mean_slot = kSimplified ? 0 : 1, inv_slot = kSimplified ? 1 : 2;
  auto wanted = [&](size_t k) { return k > 0 && k < c.num_outputs() && !c.node.outputs[k].empty(); };
  mx::Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
  stat_shape.resize(rank, 1);
  const mx::Dtype dt = x.dtype(), y_dt = c.output_dtype(0);  // Y has scale's type
  std::vector<mx::array> outs;
  if (x.size() == 0) {
    // Nothing to normalize; statistics over zero values are 0/0 = NaN in ORT.
    outs.push_back(mx::astype(x, y_dt, s));
    for (size_t k = 1; k < c.num_outputs(); ++k) outs.push_back(mx::full(stat_shape, NAN, mx::float32, s));
    return outs;
  }

  const mx::Dtype acc = AccDtype(dt);
  const float eps = c.node.AttrFloat("epsilon", 1e-5f);
  const int n = x.shape(-1);
  if (!wanted(mean_slot) && !wanted(inv_slot) && axis == rank - 1 && IsLastAxisVector(scale, n, rank) &&
      (!bias || IsLastAxisVector(*bias, n, rank))) {
    std::optional<mx::array> b;
    if (bias) b = mx::reshape(*bias, {n}, s);
    if (auto r = RowNormByKernel(
            {x, std::nullopt, std::nullopt, mx::reshape(scale, {n}, s), b, eps, kSimplified, y_dt, false},
            s)) {
      outs.push_back((*r)[0]);
      for (size_t k = 1; k < c.num_outputs(); ++k) outs.push_back(mx::zeros(stat_shape, mx::float32, s));
      return outs;
    }
  }
  std::optional<mx::array> b;
  if (bias) b = mx::astype(*bias, acc, s);
  Normalized r = Normalize(mx::astype(x, acc, s), static_cast<int>(axis), mx::astype(scale, acc, s), b, eps,
                           kSimplified, wanted(mean_slot) || wanted(inv_slot), dt == mx::float32, s);
  outs.push_back(mx::astype(r.y, y_dt, s));
  for (size_t k = 1; k < c.num_outputs(); ++k) {
    if (!wanted(k)) {
      outs.push_back(mx::zeros(stat_shape, mx::float32, s));
      continue;
    }
    const mx::array stat = k == mean_slot ? r.stats->mean : mx::divide(mx::array(1.0, acc), r.stats->std, s);
    outs.push_back(mx::astype(stat, c.output_dtype(k), s));
  }
  return outs;
}

// ---- SkipLayerNormalization, SkipSimplifiedLayerNormalization ----------------------------------

/** Input slots of the Skip*LayerNormalization forms (SkipSimplified has no beta). */
struct SkipSlots {
  std::optional<size_t> beta;
  size_t bias;
};
template <bool kSimplified>
constexpr SkipSlots kSkipSlots = kSimplified ? SkipSlots{std::nullopt, 3} : SkipSlots{3, 4};

/** Empty when input/skip shapes are a form ORT's kernel takes and MLX broadcasts the same way, else
 *  why not; -1 dims (unknown) pass. */
std::string SkipShapeProblem(const std::vector<int64_t>& in, const std::vector<int64_t>& skip) {
  if (in.size() != 2 && in.size() != 3) return "input must be 2-D or 3-D";
  if (skip.size() != 2 && skip.size() != 3) return "skip must be 2-D or 3-D";
  auto differ = [](int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; };
  for (size_t k = 1; k <= 2; ++k)
    if (differ(in[in.size() - k], skip[skip.size() - k])) return "skip's last two dims differ from input's";
  if (in.size() == 2 && skip.size() != 2) return "skip has more dims than a 2-D input";
  if (skip.size() == 3 && skip[0] != 1 && differ(in[0], skip[0]))
    return "skip batch " + std::to_string(skip[0]) +
           " is neither 1 nor input's batch (ORT wraps rows around)";
  return "";
}

template <bool kSimplified>
Claim ClaimSkipLayerNorm(const NodeView& v) {
  constexpr SkipSlots slots = kSkipSlots<kSimplified>;
  if (kSimplified && v.has_output(1))
    return Claim::No("output mean of SkipSimplifiedLayerNormalization (ORT's kernel computes no mean)");
  if (!v.has_input(1) || !v.has_input(2)) return Claim::No("skip or gamma is absent");
  const auto in = v.input_shape(0), skip = v.input_shape(1);
  if (!in || !skip) return Claim::No("input or skip has an unknown rank");
  if (std::string why = SkipShapeProblem(*in, *skip); !why.empty()) return Claim::No(why);
  for (size_t i : {size_t{2}, slots.beta.value_or(2), slots.bias})
    if (auto r = v.input_rank(i); v.has_input(i) && r && *r != 1)
      return Claim::No("input " + std::to_string(i) + " is not 1-D");
  const auto fp = {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16};
  if (v.has_output(3) && v.output_type(3) != v.input_type(0))
    return Claim::No("input_skip_bias_sum type differs from the input type");
  return ClaimTypes(v, fp, {1, 2, slots.beta.value_or(2), slots.bias}, {1, 2});
}

template <bool kSimplified>
std::vector<mx::array> TranslateSkipLayerNorm(const OpContext& c) {
  constexpr SkipSlots slots = kSkipSlots<kSimplified>;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::array& skip = c.input(1);
  const std::vector<int64_t> in_shape(x.shape().begin(), x.shape().end());
  const std::vector<int64_t> skip_shape(skip.shape().begin(), skip.shape().end());
  if (std::string why = SkipShapeProblem(in_shape, skip_shape); !why.empty()) c.Fail(why);
  const int rank = static_cast<int>(x.ndim());
  const int hidden = x.shape(-1);
  auto vector_input = [&](std::optional<size_t> slot) -> std::optional<mx::array> {
    if (!slot || !c.has_input(*slot)) return std::nullopt;
    const mx::array& p = c.input(*slot);
    if (p.ndim() != 1 || p.shape(0) != hidden)
      c.Fail("input " + std::to_string(*slot) + " must be 1-D of the input's last dim " +
             std::to_string(hidden));
    return p;
  };
  const mx::array gamma_in = *vector_input(2);
  const std::optional<mx::array> beta_in = vector_input(slots.beta), bias_in = vector_input(slots.bias);
  auto wanted = [&](size_t k) { return k < c.num_outputs() && !c.node.outputs[k].empty(); };
  mx::Shape stat_shape = x.shape();
  stat_shape.back() = 1;
  const mx::Dtype dt = x.dtype();
  const float eps = c.node.AttrFloat("epsilon", 1e-12f);
  std::vector<mx::array> outs;
  // Where wanted, one kernel of the EP's: the sum, the norm and both roundings (normalization_cuda.h).
  if (!wanted(1) && !wanted(2)) {
    const std::optional<mx::array> skip_in = skip;
    if (auto r =
            RowNormByKernel({x, skip_in, bias_in, gamma_in, beta_in, eps, kSimplified, dt, wanted(3)}, s)) {
      outs.push_back((*r)[0]);
      for (size_t k = 1; k < std::min<size_t>(c.num_outputs(), 3); ++k)
        outs.push_back(mx::zeros(stat_shape, mx::float32, s));
      if (c.num_outputs() > 3) outs.push_back(wanted(3) ? (*r)[1] : x);  // x: an unused slot's stand-in
      return outs;
    }
  }
  auto f32 = [&](const std::optional<mx::array>& p) -> std::optional<mx::array> {
    if (!p) return std::nullopt;
    return mx::astype(*p, mx::float32, s);
  };
  const mx::array gamma = *f32(gamma_in);
  const std::optional<mx::array> beta = f32(beta_in), bias = f32(bias_in);

  // The sum in float32 (ORT: float for float16, T for float32), bias added last.
  mx::array sum = mx::add(mx::astype(x, mx::float32, s), mx::astype(skip, mx::float32, s), s);
  if (bias) sum = mx::add(sum, *bias, s);
  if (x.size() == 0) {
    outs.push_back(mx::astype(x, dt, s));
    for (size_t k = 1; k < std::min<size_t>(c.num_outputs(), 3); ++k)
      outs.push_back(mx::full(stat_shape, NAN, mx::float32, s));
  } else {
    Normalized r =
        Normalize(sum, rank - 1, gamma, beta, eps, kSimplified, wanted(1) || wanted(2), dt == mx::float32, s);
    outs.push_back(mx::astype(r.y, dt, s));
    if (c.num_outputs() > 1)
      outs.push_back(wanted(1) ? r.stats->mean : mx::zeros(stat_shape, mx::float32, s));
    if (c.num_outputs() > 2)
      outs.push_back(wanted(2) ? mx::divide(mx::array(1.f), r.stats->std, s)
                               : mx::zeros(stat_shape, mx::float32, s));
  }
  if (c.num_outputs() > 3) outs.push_back(mx::astype(sum, dt, s));
  return outs;
}

}  // namespace

void RegisterContribNormalizationOps(OpRegistry& r) {
  r.Add({"", "LayerNormalization", 1, 16, ClaimLayerNorm<false>, TranslateLayerNorm<false>});
  r.Add({"", "SimplifiedLayerNormalization", 1, 25, ClaimLayerNorm<true>, TranslateLayerNorm<true>});
  r.Add(
      {kMsDomain, "SkipLayerNormalization", 1, 1, ClaimSkipLayerNorm<false>, TranslateSkipLayerNorm<false>});
  r.Add({kMsDomain, "SkipSimplifiedLayerNormalization", 1, 1, ClaimSkipLayerNorm<true>,
         TranslateSkipLayerNorm<true>});
}

}  // namespace mlx_ep
