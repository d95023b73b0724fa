// Op family: activations with a slope input or extra attributes, and the inference-time ops of
// the same kind. PRelu ThresholdedRelu Celu Mish Shrink Hardmax Dropout.
//
// Formulas follow ORT's CPU kernels (or, where ORT has none for a type, the ONNX function body
// ORT then runs); float16/bfloat16 are computed in float32 and rounded once, as ORT does for
// float16 (it casts around its float kernels).
#include <cmath>

#include "ops/unary_internal.h"

namespace mlx_ep {
namespace {

using unary::Out;
using unary::Reg;
using unary::Scalar;
using unary::Up;

constexpr std::initializer_list<ElemType> kFloat3 = {ElemType::kFloat, ElemType::kFloat16, ElemType::kDouble};

/** Claim for an elementwise node whose input 0 must be one of `types` (bfloat16 added when
 *  `bf16`), held by the MLX device, with output 0 of the same type. */
Claim ClaimTypes(const NodeView& v, std::initializer_list<ElemType> types, bool bf16) {
  if (!v.has_input(0)) return Claim::No("input 0 is absent");
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, types) && !(bf16 && t == ElemType::kBFloat16)) return Claim::No(TypeReason(v, 0));
  if (!DeviceSupports(t)) return Claim::No(TypeReason(v, 0, "not supported on the MLX device"));
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

/** float, float16, double (and bfloat16 with `kBf16`). */
template <bool kBf16>
Claim ClaimFloats(const NodeView& v) {
  return ClaimTypes(v, kFloat3, kBf16);
}

// ---- PRelu -------------------------------------------------------------------------------------
//
// y = x < 0 ? slope * x : x, slope unidirectionally broadcast to X (its shape, right-aligned,
// has dims that are 1 or X's). Integer types from opset 9 (exact, wrapping like ORT's Mul).

Claim ClaimPRelu(const NodeView& v) {
  const int ver = v.node().since_version;
  Claim claim = ver >= 9
                    ? ClaimTypes(v,
                                 {ElemType::kFloat, ElemType::kFloat16, ElemType::kDouble, ElemType::kInt32,
                                  ElemType::kInt64, ElemType::kUInt32, ElemType::kUInt64},
                                 ver >= 16)
                    : ClaimTypes(v, kFloat3, false);
  if (!claim.ok) return claim;
  if (!v.has_input(1) || v.input_type(1) != v.input_type(0))
    return Claim::No("slope is absent or its type differs");
  auto xs = v.input_shape(0), ss = v.input_shape(1);
  if (xs && ss) {
    if (ss->size() > xs->size()) return Claim::No("slope has a higher rank than X");
    for (size_t i = 0; i < ss->size(); ++i) {
      const int64_t sd = (*ss)[ss->size() - 1 - i], xd = (*xs)[xs->size() - 1 - i];
      if (sd >= 0 && xd >= 0 && sd != 1 && sd != xd)
        return Claim::No("slope is not unidirectionally broadcastable to X");
    }
  }
  return Claim::Yes();
}

std::vector<mx::array> TranslatePRelu(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::array& slope_in = c.input(1);
  const int offset = static_cast<int>(x.ndim()) - static_cast<int>(slope_in.ndim());
  bool broadcastable = offset >= 0;
  for (int i = 0; broadcastable && i < static_cast<int>(slope_in.ndim()); ++i)
    broadcastable = slope_in.shape(i) == 1 || slope_in.shape(i) == x.shape(offset + i);
  if (!broadcastable) c.Fail("slope is not unidirectionally broadcastable to X");
  const mx::array slope = mx::astype(slope_in, x.dtype(), c.stream);
  const mx::array neg = mx::multiply(slope, x, c.stream);
  return Out(c, mx::where(mx::less(x, Scalar(0, x.dtype()), c.stream), neg, x, c.stream));
}

// ---- ThresholdedRelu, Celu, Mish, Shrink -------------------------------------------------------

// ThresholdedRelu: x > alpha ? x : 0, compared in the compute dtype (float32 for float16, as ORT
// compares the float-cast input with the float alpha).
std::vector<mx::array> TranslateThresholdedRelu(const OpContext& c) {
  const mx::array& x = c.input(0);
  const mx::array xc = Up(c);
  const mx::array above = mx::greater(xc, Scalar(c.node.AttrFloat("alpha", 1.0f), xc.dtype()), c.stream);
  return {mx::where(above, x, Scalar(0, x.dtype()), c.stream)};
}

// Celu (opset 12, float only): max(x, 0) + min(alpha * (exp(x / alpha) - 1), 0), ORT's order.
// Celu-28 (more types) is left out: ORT cannot load opset-28 models.
std::vector<mx::array> TranslateCelu(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::Dtype d = x.dtype();
  const mx::array alpha = Scalar(c.node.AttrFloat("alpha", 1.0f), d);
  const mx::array em1 =
      mx::subtract(unary::Exp(mx::divide(x, alpha, c.stream), c.stream), Scalar(1, d), c.stream);
  const mx::array neg = mx::minimum(mx::multiply(alpha, em1, c.stream), Scalar(0, d), c.stream);
  return Out(c, mx::add(mx::maximum(x, Scalar(0, d), c.stream), neg, c.stream));
}

Claim ClaimCelu(const NodeView& v) { return ClaimTypes(v, {ElemType::kFloat}, false); }

// Mish: x * tanh(softplus(x)), softplus(x) = max(x, 0) + log1p(exp(-|x|)) (no overflow for
// large x, full relative precision for very negative x, where softplus(x) ~ exp(x)).
std::vector<mx::array> TranslateMish(const OpContext& c) {
  const mx::array x = Up(c);
  const mx::Dtype d = x.dtype();
  const mx::array tail =
      mx::log1p(unary::Exp(mx::negative(mx::abs(x, c.stream), c.stream), c.stream), c.stream);
  const mx::array softplus = mx::add(mx::maximum(x, Scalar(0, d), c.stream), tail, c.stream);
  return Out(c, mx::multiply(x, unary::Tanh(softplus, c.stream), c.stream));
}

// Shrink: x < -lambd ? x + bias : x > lambd ? x - bias : 0. ORT's CPU kernel computes in float32
// for every type (integers convert to float and back, truncating; double too: 1e300 gives inf
// and 0.5 + 1e-12 compares equal to lambd 0.5), so this does.
std::vector<mx::array> TranslateShrink(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::Dtype d = mx::float32;
  const mx::array xc = mx::astype(x, d, s);
  const mx::array lambd = Scalar(c.node.AttrFloat("lambd", 0.5f), d);
  const mx::array bias = Scalar(c.node.AttrFloat("bias", 0.0f), d);
  const mx::array upper = mx::where(mx::greater(xc, lambd, s), mx::subtract(xc, bias, s), Scalar(0, d), s);
  const mx::array y = mx::where(mx::less(xc, mx::negative(lambd, s), s), mx::add(xc, bias, s), upper, s);
  return {mx::astype(y, x.dtype(), s)};
}

Claim ClaimShrink(const NodeView& v) {
  return ClaimTypes(v,
                    {ElemType::kFloat, ElemType::kFloat16, ElemType::kDouble, ElemType::kInt8,
                     ElemType::kInt16, ElemType::kInt32, ElemType::kInt64, ElemType::kUInt8,
                     ElemType::kUInt16, ElemType::kUInt32, ElemType::kUInt64},
                    false);
}

// ---- Hardmax -----------------------------------------------------------------------------------
//
// 1 at the first maximum, 0 elsewhere. Before opset 13 the input is coerced to 2-D at `axis`
// (default 1) and the maximum is taken over the flattened trailing part; from 13 over one axis
// (default -1). Rows holding NaN are not matched: ORT's result then depends on how Eigen's
// vectorized max handles NaN (MLX takes the first maximum of the non-NaN values, or index 0 when
// the row starts with NaN).

Claim ClaimHardmax(const NodeView& v) {
  Claim claim = ClaimTypes(v, kFloat3, v.node().since_version >= 13);
  if (!claim.ok) return claim;
  if (auto rank = v.input_rank(0)) {
    const int64_t axis = v.node().AttrInt("axis", v.node().since_version >= 13 ? -1 : 1);
    if (*rank == 0 || axis < -*rank || axis >= *rank) return Claim::No("axis is out of range");
  }
  return claim;
}

std::vector<mx::array> TranslateHardmax(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  const bool legacy = c.node.since_version < 13;
  int64_t axis = c.node.AttrInt("axis", legacy ? 1 : -1);
  if (rank == 0 || axis < -rank || axis >= rank) c.Fail("axis is out of range");
  if (axis < 0) axis += rank;
  if (x.size() == 0) return {mx::astype(x, x.dtype(), s)};
  mx::array in = x;
  int red = static_cast<int>(axis);
  if (legacy) {
    mx::Shape flat(x.shape().begin(), x.shape().begin() + axis);
    flat.push_back(-1);
    in = mx::reshape(x, flat, s);
  }
  const mx::array first = mx::argmax(in, red, true, s);
  mx::Shape iota_shape(in.ndim(), 1);
  iota_shape[red] = in.shape(red);
  const mx::array iota = mx::reshape(mx::arange(in.shape(red), mx::uint32, s), iota_shape, s);
  const mx::array y = mx::astype(mx::equal(iota, first, s), x.dtype(), s);
  return {legacy ? mx::reshape(y, x.shape(), s) : y};
}

// ---- Dropout (inference) -----------------------------------------------------------------------
//
// Inference Dropout is the identity, with an all-true mask when asked for. Opsets 1-6 are in
// inference mode when is_test != 0; 7-11 always (no training switch); from 12 when the
// training_mode input is absent or a constant false (ORT: also when it is true but ratio is a
// constant 0). ORT's CPU EP writes an all-false mask for opsets 7-11 (the ONNX reference an
// all-true one), so a mask output there is declined.

bool IsZeroConstant(const Tensor* t) {
  if (!t || t->NumElements() != 1) return false;
  for (uint8_t b : t->bytes)
    if (b != 0) return false;
  return true;
}

Claim ClaimDropout(const NodeView& v) {
  const Node& n = v.node();
  const int ver = n.since_version;
  Claim claim = ClaimTypes(v, kFloat3, ver >= 13);
  if (!claim.ok) return claim;
  if (ver < 12 && v.has_output(1))
    return Claim::No(
        "mask output before opset 12 (ORT writes an all-false mask, the ONNX reference all-true)");
  if (ver < 7 && n.AttrInt("is_test", 0) == 0)
    return Claim::No("is_test=0 is training mode (random dropout)");
  if (ver >= 12 && v.has_input(2)) {
    const Tensor* mode = v.constant_input(2);
    if (!mode) return Claim::No("training_mode is not a constant");
    if (mode->ToInt64() != std::vector<int64_t>{0} &&
        !IsZeroConstant(v.has_input(1) ? v.constant_input(1) : nullptr))
      return Claim::No("training_mode is true (random dropout)");
  }
  if (v.has_output(1) && v.output_type(1) != ElemType::kBool) return Claim::No("mask output is not bool");
  return Claim::Yes();
}

std::vector<mx::array> TranslateDropout(const OpContext& c) {
  const mx::array& x = c.input(0);
  std::vector<mx::array> outs = {x};
  if (c.num_outputs() > 1) outs.push_back(mx::full(x.shape(), mx::array(true), mx::bool_, c.stream));
  return outs;
}

}  // namespace

void RegisterExtraActivationOps(OpRegistry& r) {
  Reg(r, "PRelu", 7, 16, ClaimPRelu, TranslatePRelu);
  Reg(r, "ThresholdedRelu", 10, 10, ClaimFloats<false>, TranslateThresholdedRelu);
  Reg(r, "ThresholdedRelu", 22, 22, ClaimFloats<true>, TranslateThresholdedRelu);
  Reg(r, "Celu", 12, 12, ClaimCelu, TranslateCelu);
  Reg(r, "Mish", 18, 18, ClaimFloats<false>, TranslateMish);
  Reg(r, "Mish", 22, 22, ClaimFloats<true>, TranslateMish);
  Reg(r, "Shrink", 9, 9, ClaimShrink, TranslateShrink);
  Reg(r, "Hardmax", 1, 13, ClaimHardmax, TranslateHardmax);
  Reg(r, "Dropout", 1, 22, ClaimDropout, TranslateDropout);
}

}  // namespace mlx_ep
