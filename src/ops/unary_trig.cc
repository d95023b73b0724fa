// Op family (part of unary): inverse trigonometric and hyperbolic functions Acos Asin Atan
// (schema versions 7, 22) and Acosh Asinh Atanh Cosh Sinh (9, 22). float16/bfloat16 are
// computed in float32 and rounded back (see unary.cc).
//
// Accuracy: MLX's CPU backend computes these with the C library's functions (std::acos, ...,
// in float and in double; not the float32 polynomial approximations it uses for exp/sin/cos),
// so float64 is claimed too (ORT's CPU EP has float kernels only). Measured against ORT and
// against the exact function (tests/python/ops/test_unary_trig.py): float32 within ~2 ulp over
// the whole domain (tiny |x|, +-1 and its neighbours, Sinh/Cosh overflow at the same x as ORT,
// NaN/inf, out-of-domain NaN), float64 within ~2 ulp, float16/bfloat16 on all 65536 values.
// MLX's CUDA backend calls CUDA's acosf, sinhf, ... (a few ulp); float64 is declined there.
#include "ops/unary_internal.h"

namespace mlx_ep {
namespace {

using unary::ClaimElementwise;
using unary::Out;
using unary::Reg;
using unary::TranslateFloat;
using unary::Types;
using unary::Up;

}  // namespace

void RegisterUnaryTrigOps(OpRegistry& r) {
  constexpr auto kF = ClaimElementwise<Types::kFloat>;
  Reg(r, "Acos", 7, 22, kF, TranslateFloat<mx::arccos>);
  Reg(r, "Asin", 7, 22, kF, TranslateFloat<mx::arcsin>);
  Reg(r, "Atan", 7, 22, kF, TranslateFloat<mx::arctan>);
  Reg(r, "Acosh", 9, 22, kF, TranslateFloat<mx::arccosh>);
  Reg(r, "Asinh", 9, 22, kF, TranslateFloat<mx::arcsinh>);
  Reg(r, "Atanh", 9, 22, kF, TranslateFloat<mx::arctanh>);
  Reg(r, "Cosh", 9, 22, kF, TranslateFloat<mx::cosh>);
  Reg(r, "Sinh", 9, 22, kF, TranslateFloat<mx::sinh>);
}

}  // namespace mlx_ep
