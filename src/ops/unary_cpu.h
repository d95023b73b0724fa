// Exp, Sigmoid and Tanh of float32 values on MLX's CPU device as one primitive of the EP's
// (unary_cpu.cc). The composed float32 exp (unary::Exp) calls libm's powf once per element, which
// keeps MLX's fused kernel scalar: a YOLO-style detector spent a third of its CPU time in SiLU's
// sigmoid; MLX's tanh is libm's tanhf (and its expm1f), scalar: 28% of Magika's time. Here the value is
// computed in double (range reduction to |r| <= ln2/2, a degree-9 polynomial, the power of two from its
// exponent bits) and rounded once: within an ulp of float32, overflow, underflow, subnormals, infinities and
// NaN as the exact function gives them.
#pragma once

#include <cstdint>
#include <optional>

#include "ops/op.h"

namespace mlx_ep {

/** The functions the primitive computes. */
enum class ExpForm {
  kExp,      ///< e^x
  kSigmoid,  ///< 1 / (1 + e^-x), from e^-|x| as the composed form does
  kTanh,     ///< tanh(x): its Taylor polynomial below |x| = 1/16, else 1 - 2 / (e^2|x| + 1), signed
  kErf,      ///< erf(x): unary::Erf's rational function in double precision, rounded once
  kGeluErf,  ///< (x * 0.5) * (erf(x * (1/sqrt 2)) + 1), GeluErf's float32 steps around kErf's erf
  kSilu,     ///< x * sigmoid(x), kSigmoid's value rounded to float32 then multiplied (SiLU's two nodes)
};

/** `form` of float32 `x` as one primitive of the EP's; nullopt off MLX's CPU device, for other
 *  dtypes, or with ONNXRUNTIME_EP_MLX_UNARY_CPU_KERNEL=0 (the composed forms). */
std::optional<mx::array> ExpOnCpu(const mx::array& x, ExpForm form, mx::Stream s);

/** `form` of `n` float32 values (`y` may be `x`) on the calling thread, as the primitive computes
 *  them (the clone for this CPU): for the EP's other CPU loops (the recurrences' gates). */
void ExpFormValues(ExpForm form, const float* x, float* y, int64_t n);

/** x * sigmoid(x) as one primitive (ExpForm::kSilu) where one of `a`, `b` is ExpOnCpu's sigmoid
 *  of the other (a Mul node after a Sigmoid node: SiLU / Swish in torch's exports and YOLO's
 *  convolutions); the same values as the composed pair, in one pass instead of two. nullopt for
 *  any other operands (or where ExpOnCpu declines). */
std::optional<mx::array> SiluOnCpu(const mx::array& a, const mx::array& b, mx::Stream s);

/** Softmax (`log`: LogSoftmax) of float32 `x` over its last axis as one primitive of the EP's on
 *  MLX's CPU stream, the composed form's steps in one pass a row (softmax_cpu.cc, SoftmaxRow);
 *  when `x` is (s / k or s * k) + mask (MLX ops: attention's scores), the primitive reads s, k
 *  and the mask instead, so those ops are evaluated only if something else reads x. nullopt as
 *  ExpOnCpu (one switch for both). */
std::optional<mx::array> SoftmaxOnCpu(const mx::array& x, bool log, mx::Stream s);

}  // namespace mlx_ep
