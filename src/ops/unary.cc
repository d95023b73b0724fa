// Op family: elementwise math functions (Abs Neg Exp Log Sqrt Reciprocal Sin Cos Tan Tanh
// Sigmoid Erf Floor Ceil Round Sign) and Clip. Activations are in unary_activation.cc.
//
// float16/bfloat16 are computed in float32 and rounded back, which is what ORT's CPU EP does
// for float16 (it inserts Casts around float-only kernels). Opset-1 forms (with the legacy
// `consumed_inputs` attribute) are not registered: ORT's CPU EP has no kernels for them.
#include <cmath>
#include <limits>

#include "ops/conv_activation.h"
#include "ops/unary_cpu.h"
#include "ops/unary_internal.h"

namespace mlx_ep {

namespace unary {

mx::array Exp(const mx::array& x, mx::StreamOrDevice s) {
  const mx::Dtype d = x.dtype();
  if (d == mx::float64) return mx::power(Scalar(M_E, d), x, s);  // std::pow: full double precision
  if (d == mx::float32 && RuntimeDevice() == mx::Device(mx::Device::cpu)) {
    // The EP's primitive (unary_cpu.h) where it applies: double-precision values, vectorized.
    if (auto y = ExpOnCpu(x, ExpForm::kExp, mx::to_stream(s))) return *y;
    // MLX's CPU exp is a float32 polynomial whose every fma() is a libm call (its JIT kernels
    // are built without -mfma) and whose rounding of x * log2(e) costs up to 3.9e-6 relative
    // near |x| = 88. Its Power kernel calls libm's powf, faster and accurate to ~1 ulp:
    // powf(e_f, x) = e^x e^(-delta x) for e_f, e rounded to float, delta = 1 - ln(e_f) = 3.0e-8,
    // so a factor 1 + delta x restores e^x (x clamped, so that -inf gives 0 * (1 + delta * -104),
    // not 0 * -inf). 1.7e-7 max relative error; overflow, underflow and subnormals as ORT's.
    const double delta = 1.0 - std::log(static_cast<double>(static_cast<float>(M_E)));
    const mx::array xc = mx::clip(x, Scalar(-104, d), Scalar(89, d), s);
    const mx::array fix = mx::add(mx::multiply(xc, Scalar(delta, d), s), Scalar(1, d), s);
    return mx::multiply(mx::power(Scalar(M_E, d), x, s), fix, s);
  }
  // GPUs: exp(x) = exp(x - 1) * e for x > 88, where MLX's exp already returns inf (x - 1 is
  // exact there). One exp per element: the shift and the factor are selected.
  const mx::array big = mx::greater(x, Scalar(88, d), s);
  const mx::array shift = mx::where(big, Scalar(1, d), Scalar(0, d), s);
  const mx::array factor = mx::where(big, Scalar(M_E, d), Scalar(1, d), s);
  return mx::multiply(mx::exp(mx::subtract(x, shift, s), s), factor, s);
}

mx::array Tanh(const mx::array& x, mx::StreamOrDevice s) {
  if (x.dtype() == mx::float32 && RuntimeDevice() == mx::Device(mx::Device::cpu))
    if (auto y = ExpOnCpu(x, ExpForm::kTanh, mx::to_stream(s))) return *y;
  return mx::tanh(x, s);
}

mx::array Erf(const mx::array& x, mx::StreamOrDevice s) {
  // Eigen's/XLA's float32 erf: x * P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf rounds to +-1
  // beyond), P of degree 6 and Q of degree 4 in x^2: no exp, no branch, ~20 multiply-adds.
  // The fit is good to 8e-8 relative; float32 rounding in the evaluation makes that 3.6e-7.
  // Where MLX has float64 (its CPU backend, whose kernels are scalar on x86 anyway, so float64
  // costs the same) it is evaluated in float64: 1.24e-7 relative once rounded to float32.
  // The polynomials are evaluated in Estrin's form, which is shallower than Horner's: MLX's
  // compile fuses elementwise chains only up to depth 11, and a deeper chain is cut into
  // several kernels with intermediates in memory.
  static constexpr double kP[] = {-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04,
                                  -5.69250639462346e-05, -2.10102402082508e-06, 2.77068142495902e-08,
                                  -2.72614225801306e-10};  // P(y) = sum kP[i] y^i
  static constexpr double kQ[] = {-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03,
                                  -2.13374055278905e-04, -1.45660718464996e-05};  // Q(y) = sum kQ[i] y^i
  // On GPUs (no float64 there) MLX's erf is the device library's (CUDA's erff, 2 ulp), 3x
  // closer than this fit evaluated in float32: 1 + erf(x) cancels for x < -2 (Gelu), and 3.6e-7
  // there was 1.5e-6 off in BiasSplitGelu on the H200. Metal's is MLX's own (untested here).
  if (!DeviceSupports(ElemType::kDouble) && RuntimeDevice().type == mx::Device::gpu) return mx::erf(x, s);
  // On MLX's CPU device float32 takes the same function as one vectorized primitive (unary_cpu.h).
  if (x.dtype() == mx::float32 && RuntimeDevice() == mx::Device(mx::Device::cpu))
    if (auto y = ExpOnCpu(x, ExpForm::kErf, mx::to_stream(s))) return *y;
  const mx::Dtype d = DeviceSupports(ElemType::kDouble) ? mx::float64 : x.dtype();
  const mx::array xc = mx::clip(mx::astype(x, d, s), Scalar(-4, d), Scalar(4, d), s);
  const mx::array y = mx::multiply(xc, xc, s);
  const mx::array y2 = mx::multiply(y, y, s);
  const mx::array y4 = mx::multiply(y2, y2, s);
  auto linear = [&](double c0, double c1) {  // c0 + c1 y
    return mx::add(mx::multiply(y, Scalar(c1, d), s), Scalar(c0, d), s);
  };
  auto fma = [&](const mx::array& a, const mx::array& b, const mx::array& c) {  // a * b + c
    return mx::add(mx::multiply(a, b, s), c, s);
  };
  const mx::array p = fma(fma(y2, Scalar(kP[6], d), linear(kP[4], kP[5])), y4,
                          fma(linear(kP[2], kP[3]), y2, linear(kP[0], kP[1])));
  const mx::array q = fma(y4, Scalar(kQ[4], d), fma(linear(kQ[2], kQ[3]), y2, linear(kQ[0], kQ[1])));
  // x * (P / Q) rather than (x * P) / Q, which underflows for subnormal x.
  return mx::astype(mx::multiply(xc, mx::divide(p, q, s), s), x.dtype(), s);
}

}  // namespace unary

namespace {

using unary::ClaimElementwise;
using unary::Out;
using unary::Reg;
using unary::Scalar;
using unary::TranslateFloat;
using unary::Types;
using unary::Up;

mx::array ExpFn(const mx::array& x, mx::StreamOrDevice s) { return unary::Exp(x, s); }
mx::array ErfFn(const mx::array& x, mx::StreamOrDevice s) { return unary::Erf(x, s); }
mx::array TanhFn(const mx::array& x, mx::StreamOrDevice s) { return unary::Tanh(x, s); }

// Sigmoid: MLX's is accurate in float32 (on GPUs it is used); in float64 it would go through
// float32's exp. On MLX's CPU backend float32 is the EP's primitive (unary_cpu.h), else composed
// on our Exp, which is faster than MLX's exp there.
mx::array SigmoidFn(const mx::array& x, mx::StreamOrDevice s) {
  const mx::Dtype d = x.dtype();
  if (d != mx::float64 && RuntimeDevice() != mx::Device(mx::Device::cpu)) return mx::sigmoid(x, s);
  if (RuntimeDevice() == mx::Device(mx::Device::cpu))
    if (auto y = ExpOnCpu(x, ExpForm::kSigmoid, mx::to_stream(s))) return *y;
  const mx::array e = unary::Exp(mx::negative(mx::abs(x, s), s), s);  // exp(-|x|) in (0, 1]
  const mx::array den = mx::add(Scalar(1, d), e, s);
  return mx::where(mx::greater_equal(x, Scalar(0, d), s), mx::reciprocal(den, s), mx::divide(e, den, s), s);
}

mx::array RoundHalfEven(const mx::array& x, mx::StreamOrDevice s) { return mx::round(x, 0, s); }

// Abs: exact in every dtype (integers wrap like ORT: abs(INT_MIN) == INT_MIN).
std::vector<mx::array> TranslateAbs(const OpContext& c) {
  const mx::array& x = c.input(0);
  if (mx::issubdtype(x.dtype(), mx::unsignedinteger)) return {x};
  return {mx::abs(x, c.stream)};
}

std::vector<mx::array> TranslateNeg(const OpContext& c) { return {mx::negative(c.input(0), c.stream)}; }

// Sign: 1/-1/0 in the input dtype. ORT's float/double kernels give NaN for NaN, its
// float16/bfloat16 kernels ((x > 0) ? 1 : (x < 0) ? -1 : 0) give 0.
std::vector<mx::array> TranslateSign(const OpContext& c) {
  const mx::array& x = c.input(0);
  const mx::Dtype d = x.dtype();
  const mx::array zero = Scalar(0, d);
  if (mx::issubdtype(d, mx::unsignedinteger))
    return {mx::astype(mx::greater(x, zero, c.stream), d, c.stream)};
  const mx::array pos = Scalar(1, d), neg = Scalar(-1, d);
  const mx::array rest = unary::IsHalf(d) || !mx::issubdtype(d, mx::floating) ? zero : x;
  return {mx::where(mx::greater(x, zero, c.stream), pos,
                    mx::where(mx::less(x, zero, c.stream), neg, rest, c.stream), c.stream)};
}

// ---- Clip ----

// Opset 6-10: min/max are float attributes (defaults: the float range). Floats only.
// ORT's Clip is Eigen's cwiseMax(min).cwiseMin(max), i.e. std::max / std::min: a NaN in x stays
// NaN, a NaN bound is ignored (x < NaN is false). mx::maximum / mx::minimum propagate a NaN bound
// instead (so does the ONNX reference); the contract is ORT's.
// A bound known not to be NaN clamps with one mx::maximum / mx::minimum, bound first: MLX's
// float maximum(lo, x) is `lo > x ? lo : x` (a NaN x stays), the same predicate as the Select, on
// MLX's scalar CPU code, CUDA and Metal; one primitive where the Select is two, which keeps
// hard-swish chains within MLX's fusion depth. Apple's vectorized CPU max (asd::max) may return
// +0 for (+0, -0) where ORT keeps -0, so there the Select stays.
bool MaximumMatchesSelect() {
#if defined(__APPLE__)
  return RuntimeDevice() != mx::Device(mx::Device::cpu);
#else
  return true;
#endif
}

mx::array ClampAbove(const mx::array& x, const mx::array& lo, mx::Stream s, bool lo_not_nan = false) {
  if (lo_not_nan && MaximumMatchesSelect()) return mx::maximum(lo, x, s);
  return mx::where(mx::less(x, lo, s), lo, x, s);
}

mx::array ClampBelow(const mx::array& x, const mx::array& hi, mx::Stream s, bool hi_not_nan = false) {
  if (hi_not_nan && MaximumMatchesSelect()) return mx::minimum(hi, x, s);
  return mx::where(mx::less(hi, x, s), hi, x, s);
}

std::vector<mx::array> TranslateClipAttr(const OpContext& c) {
  mx::array x = Up(c);
  const mx::Dtype d = x.dtype();
  const float lo = c.node.AttrFloat("min", std::numeric_limits<float>::lowest());
  const float hi = c.node.AttrFloat("max", std::numeric_limits<float>::max());
  if (!std::isnan(lo) && !std::isnan(hi))
    if (auto y = ActivatedConvInput(c, 0, {ConvActivation::Kind::kClip, lo, hi})) return {*y};
  // ORT: cwiseMax(min) then cwiseMin(max), so min > max gives max everywhere.
  return Out(c, ClampBelow(ClampAbove(x, Scalar(lo, d), c.stream, !std::isnan(lo)), Scalar(hi, d), c.stream,
                           !std::isnan(hi)));
}

Claim ClaimClipAttr(const NodeView& v) { return unary::ClaimTyped(v, Types::kFloat); }

// Opset 11+: min/max are optional scalar inputs (traced; constants or runtime values).
std::vector<mx::array> TranslateClipInputs(const OpContext& c) {
  mx::array y = c.input(0);
  auto bound = [&](size_t i) {
    const mx::array& b = c.input(i);
    if (b.size() != 1) c.Fail("input " + std::to_string(i) + " (min/max) must hold exactly one value");
    return mx::reshape(b, {}, c.stream);
  };
  // Clamping is exact in any dtype: no float32 detour needed for float16/bfloat16.
  // An absent bound is the type's range, as in ORT: -inf/inf clamp to lowest()/max() then.
  const mx::Dtype d = y.dtype();
  const bool floating = mx::issubdtype(d, mx::floating);
  auto not_nan = [&](size_t i) {  // integers, or a float bound the trace knows (a constant)
    const std::optional<double> known = c.known_scalar(i);
    return !floating || (known && !std::isnan(*known));
  };
  if (d == mx::float32 && (!c.has_input(1) || not_nan(1)) && (!c.has_input(2) || not_nan(2))) {
    // Known bounds, an absent one the type's range: applied by the Conv before it (CPU).
    const float lo = c.has_input(1) ? static_cast<float>(*c.known_scalar(1)) : mx::finfo(d).min;
    const float hi = c.has_input(2) ? static_cast<float>(*c.known_scalar(2)) : mx::finfo(d).max;
    if (auto fused = ActivatedConvInput(c, 0, {ConvActivation::Kind::kClip, lo, hi})) return {*fused};
  }
  if (c.has_input(1))
    y = ClampAbove(y, bound(1), c.stream, not_nan(1));
  else if (floating)
    y = ClampAbove(y, mx::array(mx::finfo(d).min, d), c.stream, true);
  if (c.has_input(2))
    y = ClampBelow(y, bound(2), c.stream, not_nan(2));
  else if (floating)
    y = ClampBelow(y, mx::array(mx::finfo(d).max, d), c.stream, true);
  return {y};
}

Claim ClaimClipInputs(const NodeView& v) {
  const int ver = v.node().since_version;
  Claim claim = unary::ClaimTyped(v, ver >= 12 ? Types::kNumeric : Types::kFloat);
  if (!claim.ok) return claim;
  for (size_t i = 1; i < 3; ++i)
    if (v.has_input(i) && v.input_type(i) != v.input_type(0))
      return Claim::No("input " + std::to_string(i) + " (min/max) has a different type than input 0");
  if (v.num_inputs() > 3) return Claim::No("more than 3 inputs");
  return Claim::Yes();
}

}  // namespace

void RegisterUnaryOps(OpRegistry& r) {
  constexpr auto kF = ClaimElementwise<Types::kFloat>;
  constexpr auto kF32 = ClaimElementwise<Types::kFloatNoDouble>;
  constexpr auto kFold = HostEval::kFromValues;  // shape arithmetic uses these: they fold at trace time
  Reg(r, "Abs", 6, 13, ClaimElementwise<Types::kNumeric>, TranslateAbs, kFold);
  Reg(r, "Neg", 6, 13, ClaimElementwise<Types::kSignedFloat>, TranslateNeg, kFold);
  Reg(r, "Exp", 6, 13, kF, TranslateFloat<ExpFn>);
  Reg(r, "Log", 6, 13, kF, TranslateFloat<mx::log>);
  Reg(r, "Sqrt", 6, 13, kF, TranslateFloat<mx::sqrt>, kFold);
  Reg(r, "Reciprocal", 6, 13, kF, TranslateFloat<mx::reciprocal>);
  // MLX's CPU sin/cos/erf are float32 approximations: no float64.
  Reg(r, "Sin", 7, 22, kF32, TranslateFloat<mx::sin>);
  Reg(r, "Cos", 7, 22, kF32, TranslateFloat<mx::cos>);
  Reg(r, "Tan", 7, 22, kF, TranslateFloat<mx::tan>);
  Reg(r, "Tanh", 6, 13, kF, TranslateFloat<TanhFn>);
  Reg(r, "Sigmoid", 6, 13, kF, TranslateFloat<SigmoidFn>);
  Reg(r, "Erf", 9, 13, kF32, TranslateFloat<ErfFn>);
  Reg(r, "Floor", 6, 13, kF, TranslateFloat<mx::floor>, kFold);
  Reg(r, "Ceil", 6, 13, kF, TranslateFloat<mx::ceil>, kFold);
  Reg(r, "Round", 11, 22, kF, TranslateFloat<RoundHalfEven>);
  Reg(r, "Sign", 9, 13, ClaimElementwise<Types::kNumeric>, TranslateSign, kFold);
  Reg(r, "Clip", 6, 10, ClaimClipAttr, TranslateClipAttr);
  Reg(r, "Clip", 11, 13, ClaimClipInputs, TranslateClipInputs);
  RegisterUnaryActivationOps(r);
  RegisterUnaryTrigOps(r);
}

}  // namespace mlx_ep
