// Op family: arithmetic with ONNX (numpy) broadcasting: Add Sub Mul Div Pow Mod, and the
// variadic Min Max Sum Mean.
//
// ORT semantics mirrored here (checked against ORT's CPU EP):
//  - Add/Sub/Mul wrap around on integer overflow, like C++ (and MLX) integer arithmetic.
//  - integer Div truncates toward zero (C++ `/`). MLX's signed floor_divide truncates on some
//    backends and floors on others, so the quotient is taken of a - trunc_rem(a, b), an exact
//    multiple of b, where both agree.
//  - Mod: fmod=1 takes the sign of the dividend (C fmod), fmod=0 (integers only) the sign of the
//    divisor (Python %, which is MLX's remainder on every backend). Float fmod is
//    sign(a) * remainder(|a|, |b|), exact. Floats with fmod=0 are declined (ORT rejects them
//    before opset 28). ORT computes integer fmod=1 through double, so for |values| > 2^53 it
//    differs from the exact remainder computed here.
//  - Pow: ORT computes static_cast<T>(std::pow(x, y)), i.e. in double whenever the two types
//    differ or the base is an integer. Integer ^ integer is computed exactly with integer
//    arithmetic (negative exponents: 1^y=1, (-1)^y=+-1, else 0, as the truncated double result);
//    a float exponent with an integer base needs float64 (CPU only), else it is declined.
//    Where ORT's double result does not fit T (overflow, 0^-k) its cast is undefined behaviour;
//    the integer power here wraps and gives 0 for 0^-k.
//    A float base to a known one-value exponent of 2 or 3 is x * x or x * x * x in the base's
//    type, as ORT special-cases them (bit for bit against its CPU EP: float32 and float64 bases,
//    float and integer exponents; MLX's power differed in 1.5 M of 5 M cubes and in 740 of 2,048
//    float32 squares that round to a tie), and multiplies fuse where power is a call per value
//    (GPT-2's tanh Gelu cubes: 24% of its CPU profile). float16/bfloat16 in float32, rounded once.
//  - Min/Max propagate NaN (ORT 1.31 does, for either operand).
//  - Mean = (x0 + x1 + ...) * (1/n), the sum left to right, as ORT does.
//  - float16/bfloat16: Div, Pow and Mean compute in float32 and round once; Add/Sub/Mul/Sum and
//    Min/Max are correctly rounded (or exact) in the narrow type already.
//  - opset < 7 Add/Sub/Mul/Div/Pow (legacy `broadcast`/`axis` attributes) are not registered:
//    ORT's CPU EP does not run them either. Min/Max/Sum/Mean-6 require equal shapes, for which
//    numpy broadcasting is the identity, so they share the opset-8 translation.
#include "ops/claim_util.h"
#include "ops/conv_activation.h"
#include "ops/registry.h"
#include "ops/unary_cpu.h"

namespace mlx_ep {
namespace {

bool IsLowFloat(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }

/** True when the runtime device computes float64 (the CPU). */
bool HasFloat64() { return DeviceSupports(ElemType::kDouble); }

// ---------------------------------------------------------------------------------------------
// Claims

/** Every input present, of the same type, one of `allowed`; the output of that type too. */
Claim ClaimSameType(const NodeView& v, std::initializer_list<ElemType> allowed, size_t min_inputs) {
  if (v.num_inputs() < min_inputs) return Claim::No("too few inputs");
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, allowed)) return Claim::No(TypeReason(v, 0));
  for (size_t i = 0; i < v.num_inputs(); ++i) {
    if (!v.has_input(i)) return Claim::No("input " + std::to_string(i) + " is missing");
    if (v.input_type(i) != t) return Claim::No("inputs have different types");
  }
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

constexpr std::initializer_list<ElemType> kNumericTypes = {
    ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16, ElemType::kDouble,
    ElemType::kInt8,  ElemType::kInt16,   ElemType::kInt32,    ElemType::kInt64,
    ElemType::kUInt8, ElemType::kUInt16,  ElemType::kUInt32,   ElemType::kUInt64};

Claim ClaimNumericBinary(const NodeView& v) {
  if (v.num_inputs() != 2) return Claim::No("expects 2 inputs");
  return ClaimSameType(v, kNumericTypes, 2);
}

Claim ClaimNumericVariadic(const NodeView& v) { return ClaimSameType(v, kNumericTypes, 1); }

Claim ClaimFloatVariadic(const NodeView& v) { return ClaimSameType(v, kFloatTypes, 1); }

Claim ClaimMod(const NodeView& v) {
  Claim c = ClaimNumericBinary(v);
  if (!c.ok) return c;
  const int64_t fmod = v.node().AttrInt("fmod", 0);
  if (fmod != 0 && fmod != 1) return Claim::No("attribute fmod=" + std::to_string(fmod) + " not supported");
  if (fmod == 0 && IsFloating(v.input_type(0)))
    return Claim::No("attribute fmod=0 is not valid for floating-point inputs");
  return Claim::Yes();
}

Claim ClaimPow(const NodeView& v) {
  if (v.num_inputs() != 2 || !v.has_input(0) || !v.has_input(1)) return Claim::No("expects 2 inputs");
  const ElemType t = v.input_type(0), e = v.input_type(1);
  if (!IsOneOf(t, kFloatTypes) && !IsOneOf(t, {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 0));
  if (!IsNumeric(e)) return Claim::No(TypeReason(v, 1));
  if (v.output_type(0) != t) return Claim::No("output type differs from the base type");
  if (IsInteger(t)) {
    if (e == ElemType::kUInt64) return Claim::No(TypeReason(v, 1, "uint64 exponent of an integer base"));
    if (IsFloating(e) && !HasFloat64())
      return Claim::No(TypeReason(v, 1, "a float exponent of an integer base needs float64"));
  }
  return Claim::Yes();
}

// ---------------------------------------------------------------------------------------------
// Translations

std::vector<mx::array> TranslateAdd(const OpContext& c) {
  return {mx::add(c.input(0), c.input(1), c.stream)};
}
std::vector<mx::array> TranslateSub(const OpContext& c) {
  return {mx::subtract(c.input(0), c.input(1), c.stream)};
}
std::vector<mx::array> TranslateMul(const OpContext& c) {
  if (auto y = SiluOnCpu(c.input(0), c.input(1), c.stream)) {  // Mul(x, Sigmoid(x)): one pass
    // x read by the Sigmoid and this Mul only, the Sigmoid by this Mul only: in the task of the
    // Conv that computes x, where there is one.
    const size_t x = c.input(0).id() == y->inputs()[0].id() ? 0 : 1;
    if (c.readers(x) == 2 && c.readers(1 - x) == 1)
      if (auto fused = ActivatedConv(c.input(x), {ConvActivation::Kind::kSilu})) return {*fused};
    return {*y};
  }
  return {mx::multiply(c.input(0), c.input(1), c.stream)};
}

/** The truncated remainder of signed integers (sign of `a`) from MLX's floored one (sign of `b`,
 *  the same on every backend): where they differ, the floored one is the truncated one + b. */
mx::array TruncatedRemainder(const mx::array& a, const mx::array& b, const mx::Stream& s) {
  mx::array zero(0, a.dtype());
  mx::array r = mx::remainder(a, b, s);
  mx::array fix = mx::logical_and(mx::not_equal(r, zero, s),
                                  mx::not_equal(mx::less(r, zero, s), mx::less(a, zero, s), s), s);
  return mx::where(fix, mx::subtract(r, b, s), r, s);
}

std::vector<mx::array> TranslateDiv(const OpContext& c) {
  const mx::array &a = c.input(0), &b = c.input(1);
  const mx::Dtype t = a.dtype();
  const auto& s = c.stream;
  if (mx::issubdtype(t, mx::floating)) {
    if (IsLowFloat(t))
      return {mx::astype(mx::divide(mx::astype(a, mx::float32, s), mx::astype(b, mx::float32, s), s), t, s)};
    return {mx::divide(a, b, s)};
  }
  // ORT's kernel errors on an integer division by zero (no value exists): so does the run.
  c.Require(mx::not_equal(b, mx::array(0, b.dtype()), s), "Integer division by zero");
  if (mx::issubdtype(t, mx::unsignedinteger)) return {mx::floor_divide(a, b, s)};
  // Signed: a - trunc_rem(a, b) is an exact multiple of b, so the division is exact and
  // floor_divide's rounding (MLX backends differ there for signed integers) does not matter.
  // |a - r| <= |a|: no overflow.
  return {mx::floor_divide(mx::subtract(a, TruncatedRemainder(a, b, s), s), b, s)};
}

std::vector<mx::array> TranslateMod(const OpContext& c) {
  const mx::array &a = c.input(0), &b = c.input(1);
  const mx::Dtype t = a.dtype();
  const auto& s = c.stream;
  const bool fmod = c.node.AttrInt("fmod", 0) == 1;
  if (!mx::issubdtype(t, mx::floating))
    c.Require(mx::not_equal(b, mx::array(0, b.dtype()), s), "Integer modulo by zero");
  if (mx::issubdtype(t, mx::unsignedinteger)) return {mx::remainder(a, b, s)};
  if (mx::issubdtype(t, mx::floating)) {
    // fmod(a, b) = sign(a) * fmod(|a|, |b|); for non-negative operands MLX's (floored)
    // remainder is exactly fmod.
    const mx::Dtype ct = IsLowFloat(t) ? mx::float32 : t;
    mx::array ac = mx::astype(a, ct, s);
    mx::array r = mx::remainder(mx::abs(ac, s), mx::abs(mx::astype(b, ct, s), s), s);
    r = mx::where(mx::less(ac, mx::array(0, ct), s), mx::negative(r, s), r, s);
    return {mx::astype(r, t, s)};
  }
  // Signed integers: MLX's remainder is the floored one (Python %, ORT's fmod=0).
  return {fmod ? TruncatedRemainder(a, b, s) : mx::remainder(a, b, s)};
}

std::vector<mx::array> TranslatePow(const OpContext& c) {
  const mx::array &x = c.input(0), &y = c.input(1);
  const mx::Dtype t = x.dtype(), e = y.dtype();
  const auto& s = c.stream;
  const bool int_base = mx::issubdtype(t, mx::integer);
  const bool int_exp = mx::issubdtype(e, mx::integer);
  if (int_base && int_exp) {
    // Exact integer power in int64 (wrapping like the narrower type when cast back).
    mx::array b = mx::astype(x, mx::int64, s), n = mx::astype(y, mx::int64, s);
    mx::array zero(0, mx::int64), one(1, mx::int64);
    mx::array pos = mx::power(b, mx::maximum(n, zero, s), s);
    // x^-k truncated: 1 for x=1, +-1 for x=-1 (by parity), 0 otherwise.
    mx::array odd = mx::not_equal(mx::remainder(n, mx::array(2, mx::int64), s), zero, s);
    mx::array minus_one_pow = mx::where(odd, mx::array(-1, mx::int64), one, s);
    mx::array neg =
        mx::where(mx::equal(b, one, s), one,
                  mx::where(mx::equal(b, mx::array(-1, mx::int64), s), minus_one_pow, zero, s), s);
    return {mx::astype(mx::where(mx::less(n, zero, s), neg, pos, s), t, s)};
  }
  if (const std::optional<double> exponent = c.known_scalar(1); exponent && !int_base) {
    // ORT's own special cases of a one-value exponent: x * x and x * x * x in the base's type.
    const double e = *exponent;
    const mx::Dtype wide = t == mx::float64 ? mx::float64 : mx::float32;  // narrow floats round once
    const mx::array xw = mx::astype(x, wide, s);
    if (e == 2.0) return {mx::astype(mx::multiply(xw, xw, s), t, s)};
    if (e == 3.0) return {mx::astype(mx::multiply(mx::multiply(xw, xw, s), xw, s), t, s)};
  }
  // ORT computes in double whenever the exponent type differs from the base type (std::pow
  // promotes); match that where float64 is available.
  mx::Dtype ct = mx::float32;
  if (t == mx::float64 || e == mx::float64)
    ct = mx::float64;
  else if (int_base || (t == mx::float32 && e != mx::float32 && HasFloat64()))
    ct = mx::float64;
  if (ct == mx::float64 && !HasFloat64()) c.Fail("float64 is not available on this device");
  mx::array r = mx::power(mx::astype(x, ct, s), mx::astype(y, ct, s), s);
  return {mx::astype(r, t, s)};
}

template <mx::array (*Op)(const mx::array&, const mx::array&, mx::StreamOrDevice)>
mx::array Fold(const OpContext& c, mx::Dtype compute) {
  mx::array acc = mx::astype(c.input(0), compute, c.stream);
  for (size_t i = 1; i < c.num_inputs(); ++i)
    acc = Op(acc, mx::astype(c.input(i), compute, c.stream), c.stream);
  return acc;
}

std::vector<mx::array> TranslateMin(const OpContext& c) {
  if (c.num_inputs() == 1) return {c.input(0)};
  return {Fold<mx::minimum>(c, c.input(0).dtype())};
}
std::vector<mx::array> TranslateMax(const OpContext& c) {
  if (c.num_inputs() == 1) return {c.input(0)};
  return {Fold<mx::maximum>(c, c.input(0).dtype())};
}
std::vector<mx::array> TranslateSum(const OpContext& c) {
  if (c.num_inputs() == 1) return {c.input(0)};
  return {Fold<mx::add>(c, c.input(0).dtype())};
}
std::vector<mx::array> TranslateMean(const OpContext& c) {
  const mx::Dtype t = c.input(0).dtype();
  const mx::Dtype ct = IsLowFloat(t) ? mx::float32 : t;
  mx::array sum = Fold<mx::add>(c, ct);
  const double n = static_cast<double>(c.num_inputs());
  mx::array weight = ct == mx::float64 ? mx::array(1.0 / n, mx::float64)
                                       : mx::array(1.0f / static_cast<float>(n), mx::float32);
  return {mx::astype(mx::multiply(sum, weight, c.stream), t, c.stream)};
}

}  // namespace

void RegisterArithmeticOps(OpRegistry& r) {
  r.Add({"", "Add", 7, 14, ClaimNumericBinary, TranslateAdd, HostEval::kFromValues});
  r.Add({"", "Sub", 7, 14, ClaimNumericBinary, TranslateSub, HostEval::kFromValues});
  r.Add({"", "Mul", 7, 14, ClaimNumericBinary, TranslateMul, HostEval::kFromValues});
  r.Add({"", "Div", 7, 14, ClaimNumericBinary, TranslateDiv, HostEval::kFromValues});
  r.Add({"", "Pow", 7, 15, ClaimPow, TranslatePow});
  r.Add({"", "Mod", 10, 13, ClaimMod, TranslateMod, HostEval::kFromValues});
  r.Add({"", "Min", 6, 13, ClaimNumericVariadic, TranslateMin, HostEval::kFromValues});
  r.Add({"", "Max", 6, 13, ClaimNumericVariadic, TranslateMax, HostEval::kFromValues});
  r.Add({"", "Sum", 6, 13, ClaimFloatVariadic, TranslateSum});
  r.Add({"", "Mean", 6, 13, ClaimFloatVariadic, TranslateMean});
}

}  // namespace mlx_ep
