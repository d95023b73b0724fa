// Op family (part of unary): activations Relu LeakyRelu Elu Selu HardSigmoid HardSwish
// Softplus Softsign Gelu. Formulas follow ORT's CPU kernels so edge cases (NaN, ±inf, -0)
// come out the same; float16/bfloat16 are computed in float32 (see unary.cc).
#include <cmath>

#include "ops/conv_activation.h"
#include "ops/unary_cpu.h"
#include "ops/unary_internal.h"

namespace mlx_ep {
namespace {

using unary::ClaimElementwise;
using unary::Out;
using unary::Reg;
using unary::Scalar;
using unary::Types;
using unary::Up;

// Relu: max(x, 0); exact in the input dtype. Integer types from opset 14.
Claim ClaimRelu(const NodeView& v) {
  return unary::ClaimTyped(v, v.node().since_version >= 14 ? Types::kSignedFloat : Types::kFloat);
}

using Kind = ConvActivation::Kind;

std::vector<mx::array> TranslateRelu(const OpContext& c) {
  if (auto y = ActivatedConvInput(c, 0, {Kind::kRelu})) return {*y};  // in the Conv's task (CPU)
  const mx::array& x = c.input(0);
  return {mx::maximum(x, Scalar(0, x.dtype()), c.stream)};
}

// LeakyRelu: x >= 0 ? x : alpha * x.
std::vector<mx::array> TranslateLeakyRelu(const OpContext& c) {
  if (auto y = ActivatedConvInput(c, 0, {Kind::kLeakyRelu, c.node.AttrFloat("alpha", 0.01f)})) return {*y};
  const mx::array x = Up(c);
  const mx::array alpha = Scalar(c.node.AttrFloat("alpha", 0.01f), x.dtype());
  const mx::array neg = mx::multiply(alpha, x, c.stream);
  return Out(c, mx::where(mx::greater_equal(x, Scalar(0, x.dtype()), c.stream), x, neg, c.stream));
}

// Elu: x >= 0 ? x : alpha * (exp(x) - 1).
std::vector<mx::array> TranslateElu(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::Dtype d = x.dtype();
  const mx::array alpha = Scalar(c.node.AttrFloat("alpha", 1.0f), d);
  const mx::array em1 = mx::subtract(unary::Exp(x, c.stream), Scalar(1, d), c.stream);
  const mx::array neg = mx::multiply(alpha, em1, c.stream);
  return Out(c, mx::where(mx::greater_equal(x, Scalar(0, d), c.stream), x, neg, c.stream));
}

// Selu: gamma * (max(x, 0) + min(alpha * (exp(x) - 1), 0)).
std::vector<mx::array> TranslateSelu(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::Dtype d = x.dtype();
  const mx::array alpha = Scalar(c.node.AttrFloat("alpha", 1.67326319217681884765625f), d);
  const mx::array gamma = Scalar(c.node.AttrFloat("gamma", 1.05070102214813232421875f), d);
  const mx::array zero = Scalar(0, d);
  const mx::array em1 = mx::subtract(unary::Exp(x, c.stream), Scalar(1, d), c.stream);
  const mx::array neg = mx::minimum(mx::multiply(alpha, em1, c.stream), zero, c.stream);
  const mx::array sum = mx::add(mx::maximum(x, zero, c.stream), neg, c.stream);
  return Out(c, mx::multiply(gamma, sum, c.stream));
}

// max(0, min(1, alpha * x + beta)).
mx::array HardSigmoid(const mx::array& x, double alpha, double beta, mx::StreamOrDevice s) {
  const mx::Dtype d = x.dtype();
  const mx::array lin = mx::add(mx::multiply(Scalar(alpha, d), x, s), Scalar(beta, d), s);
  return mx::maximum(mx::minimum(lin, Scalar(1, d), s), Scalar(0, d), s);
}

std::vector<mx::array> TranslateHardSigmoid(const OpContext& c) {
  const float alpha = c.node.AttrFloat("alpha", 0.2f), beta = c.node.AttrFloat("beta", 0.5f);
  if (auto y = ActivatedConvInput(c, 0, {Kind::kHardSigmoid, alpha, beta})) return {*y};
  return Out(c, HardSigmoid(Up(c), alpha, beta, c.stream));
}

// HardSwish: x * HardSigmoid(x) with alpha = 1/6 (rounded to the compute dtype), beta = 0.5.
std::vector<mx::array> TranslateHardSwish(const OpContext& c) {
  if (auto y = ActivatedConvInput(c, 0, {Kind::kHardSwish, static_cast<float>(1.0 / 6.0), 0.5f})) return {*y};
  const mx::array x = Up(c);
  return Out(c, mx::multiply(x, HardSigmoid(x, 1.0 / 6.0, 0.5, c.stream), c.stream));
}

// Softplus: x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)).
std::vector<mx::array> TranslateSoftplus(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::array pos =
      mx::add(x, mx::log1p(unary::Exp(mx::negative(x, c.stream), c.stream), c.stream), c.stream);
  const mx::array neg = mx::log1p(unary::Exp(x, c.stream), c.stream);
  return Out(c, mx::where(mx::greater(x, Scalar(0, x.dtype()), c.stream), pos, neg, c.stream));
}

// Softsign: x / (1 + |x|).
std::vector<mx::array> TranslateSoftsign(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::array den = mx::add(Scalar(1, x.dtype()), mx::abs(x, c.stream), c.stream);
  return Out(c, mx::divide(x, den, c.stream));
}

// Gelu (opset 20): 0.5 x (1 + erf(x / sqrt 2)), or with approximate="tanh"
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
Claim ClaimGelu(const NodeView& v) {
  const std::string approx = v.node().AttrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return Claim::No("attribute approximate=" + approx + " not supported");
  return unary::ClaimTyped(v, Types::kFloatNoDouble);  // erf is float32-only
}

std::vector<mx::array> TranslateGelu(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::Dtype d = x.dtype();
  const bool tanh_approx = c.node.AttrString("approximate", "none") == "tanh";
  mx::array inner = x;
  if (tanh_approx) {
    const double k_alpha = std::sqrt(2.0 / M_PI);
    const double k_beta = k_alpha * 0.044715;
    // ORT: x * (kBeta * x * x + kAlpha), then tanh.
    const mx::array x2 = mx::multiply(x, x, c.stream);
    const mx::array poly =
        mx::add(mx::multiply(Scalar(k_beta, d), x2, c.stream), Scalar(k_alpha, d), c.stream);
    inner = unary::Tanh(mx::multiply(x, poly, c.stream), c.stream);
  } else {
    if (d == mx::float32 && RuntimeDevice() == mx::Device(mx::Device::cpu))
      if (auto y = ExpOnCpu(x, ExpForm::kGeluErf, c.stream)) return Out(c, *y);  // these steps, one primitive
    inner = unary::Erf(mx::multiply(x, Scalar(M_SQRT1_2, d), c.stream), c.stream);
  }
  const mx::array half_x = mx::multiply(Scalar(0.5, d), x, c.stream);
  return Out(c, mx::multiply(half_x, mx::add(inner, Scalar(1, d), c.stream), c.stream));
}

}  // namespace

void RegisterUnaryActivationOps(OpRegistry& r) {
  constexpr auto kF = ClaimElementwise<Types::kFloat>;
  Reg(r, "Relu", 6, 14, ClaimRelu, TranslateRelu);
  Reg(r, "LeakyRelu", 6, 16, kF, TranslateLeakyRelu);
  Reg(r, "Elu", 6, 22, kF, TranslateElu);
  Reg(r, "Selu", 6, 22, kF, TranslateSelu);
  Reg(r, "HardSigmoid", 6, 22, kF, TranslateHardSigmoid);
  Reg(r, "HardSwish", 14, 22, kF, TranslateHardSwish);
  Reg(r, "Softplus", 1, 22, kF, TranslateSoftplus);
  Reg(r, "Softsign", 1, 22, kF, TranslateSoftsign);
  Reg(r, "Gelu", 20, 20, ClaimGelu, TranslateGelu);
}

}  // namespace mlx_ep
