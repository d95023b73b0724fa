// Helpers shared by the unary op family's files (unary.cc, unary_activation.cc, unary_trig.cc).
#pragma once

#include <string>
#include <vector>

#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace unary {

/** Which element types an elementwise op takes. */
enum class Types {
  kFloat,          ///< float, float16, bfloat16, double
  kFloatNoDouble,  ///< float, float16, bfloat16
  kSignedFloat,    ///< floats and signed integers
  kNumeric,        ///< floats and all integers
};

/** True when `t` belongs to `set`. */
inline bool InSet(ElemType t, Types set) {
  if (set == Types::kFloatNoDouble)
    return IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16});
  if (IsOneOf(t, kFloatTypes)) return true;
  switch (set) {
    case Types::kFloat:
    case Types::kFloatNoDouble:
      return false;
    case Types::kSignedFloat:
      return IsSignedInteger(t);
    case Types::kNumeric:
      return IsInteger(t);
  }
  return false;
}

/** Checks input 0 against `set`, the runtime device and the output type (same as the input). */
inline Claim ClaimTyped(const NodeView& v, Types set) {
  if (!v.has_input(0)) return Claim::No("input 0 is absent");
  const ElemType t = v.input_type(0);
  if (!InSet(t, set))
    return Claim::No(set == Types::kFloatNoDouble && t == ElemType::kDouble
                         ? TypeReason(v, 0, "MLX computes this function in float32 precision")
                         : TypeReason(v, 0));
  if (!DeviceSupports(t)) return Claim::No(TypeReason(v, 0, "not supported on the MLX device"));
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

/** Claim for a plain elementwise op over `S` (attributes, if any, are checked elsewhere). */
template <Types S>
Claim ClaimElementwise(const NodeView& v) {
  return ClaimTyped(v, S);
}

/** True for the half-precision floats that are computed in float32 (as ORT's CPU EP does). */
inline bool IsHalf(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }

/** The dtype a float op computes in: float32 for float16/bfloat16, else the input's dtype. */
inline mx::Dtype ComputeDtype(mx::Dtype d) { return IsHalf(d) ? mx::float32 : d; }

/** Input 0 converted to its compute dtype. */
inline mx::array Up(const OpContext& c) {
  const mx::array& x = c.input(0);
  return IsHalf(x.dtype()) ? mx::astype(x, mx::float32, c.stream) : x;
}

/** A scalar of `dtype` (so that no type promotion happens). */
inline mx::array Scalar(double value, mx::Dtype dtype) { return mx::array(value, dtype); }

/** `y` converted to the ONNX output dtype, as the one-element result vector. */
inline std::vector<mx::array> Out(const OpContext& c, const mx::array& y) {
  return {mx::astype(y, c.output_dtype(0), c.stream)};
}

/** exp(x) for a float32/float64 array, accurate to a few ulp over the whole range (MLX's CPU
 *  exp is a float32 approximation that overflows from x > 88, is off by up to 3.9e-6 near
 *  |x| = 88 and loses float64 precision). */
mx::array Exp(const mx::array& x, mx::StreamOrDevice s);

/** erf(x) for a float32 array, without exp: 1.3e-7 relative error on MLX's CPU backend, 4.5e-7
 *  on GPUs (MLX's erf has an absolute error of ~1e-7, a large relative error for small x). */
mx::array Erf(const mx::array& x, mx::StreamOrDevice s);

/** tanh(x): on MLX's CPU device float32 through the EP's primitive (unary_cpu.h; MLX's is libm's
 *  tanhf, scalar), else MLX's. */
mx::array Tanh(const mx::array& x, mx::StreamOrDevice s);

/** Registers `op` over [since, until]. */
inline void Reg(OpRegistry& r, const char* op, int since, int until, ClaimFn claim, TranslateFn translate,
                HostEval host_eval = HostEval::kNone) {
  r.Add({"", op, since, until, claim, translate, host_eval});
}

/** A unary MLX function pointer (mx::exp, mx::arccos, ...). */
using MlxUnaryFn = mx::array (*)(const mx::array&, mx::StreamOrDevice);

/** A float function computed in the compute dtype and rounded to the output dtype. */
template <MlxUnaryFn F>
std::vector<mx::array> TranslateFloat(const OpContext& c) {
  return Out(c, F(Up(c), c.stream));
}

}  // namespace unary

void RegisterUnaryActivationOps(OpRegistry& r);  // unary_activation.cc, called by RegisterUnaryOps
void RegisterUnaryTrigOps(OpRegistry& r);        // unary_trig.cc, called by RegisterUnaryOps

}  // namespace mlx_ep
