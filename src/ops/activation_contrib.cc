// Op family: ONNX Runtime's contrib activations (com.microsoft 1), as ORT 1.31's CPU kernels
// compute them (contrib_ops/cpu/activations.h, bert/bias_gelu.cc):
//
//  - Gelu: 0.5 x (1 + erf(x / sqrt 2)).
//  - BiasGelu: Gelu(A + B); B is 1-D, one value per position of A's last dim.
//  - FastGelu: the tanh approximation 0.5 v (1 + tanh(v (0.0356774 v^2 + 0.7978846))), v = X (+ bias,
//    1-D as BiasGelu's).
//  - QuickGelu: x sigmoid(alpha x), alpha defaulting to 1.702.
//  - BiasAdd: X + bias + skip (X, skip [N, S, C], bias [C]) and BiasSplitGelu: with v = X + bias
//    ([N, S, D], bias [D]), v[..., :D/2] * Gelu(v[..., D/2:]). ORT has only CUDA kernels for these
//    two; they follow the contrib op documentation.
//
// erf is the project's exp-free float32 Erf (unary_internal.h), tanh MLX's, sigmoid the EP's
// primitive on MLX's CPU backend (as unary.cc's Sigmoid; QuickGelu with alpha 1 is SiluCpu).
// ORT's CPU kernels are float32: float16 runs there as float32 between inserted Casts (or as the
// function body, also in float32), so float16 and bfloat16 compute in float32 here and round once.
// float64 is declined (ORT has no kernel for Gelu/BiasGelu; FastGelu/QuickGelu run their function
// bodies, not matched here).
#include <cmath>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/unary_cpu.h"
#include "ops/unary_internal.h"

namespace mlx_ep {
namespace {

using unary::Scalar;

constexpr const char* kMsDomain = "com.microsoft";
constexpr std::initializer_list<ElemType> kTypes = {ElemType::kFloat, ElemType::kFloat16,
                                                    ElemType::kBFloat16};

/** Inputs 0..n-1 of X's float type (float32/float16/bfloat16), output of X's type. */
Claim ClaimSameTypes(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, kTypes))
    return Claim::No(t == ElemType::kDouble ? TypeReason(v, 0, "ORT's CPU EP has no float64 kernel to match")
                                            : TypeReason(v, 0));
  for (size_t i = 1; i < v.num_inputs(); ++i)
    if (v.has_input(i) && v.input_type(i) != t)
      return Claim::No("input " + std::to_string(i) + " type differs");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

/** Input `i` in float32 (float16/bfloat16 are widened exactly). */
mx::array Up(const OpContext& c, size_t i) { return mx::astype(c.input(i), mx::float32, c.stream); }

/** `y` rounded to the output dtype. */
std::vector<mx::array> Out(const OpContext& c, const mx::array& y) {
  return {mx::astype(y, c.output_dtype(0), c.stream)};
}

/** x + bias for a 1-D bias of x's last dim (ORT's bias rule for BiasGelu/FastGelu/BiasSplitGelu). */
mx::array AddBias(const OpContext& c, const mx::array& x, size_t bias_slot) {
  const mx::array& b = c.input(bias_slot);
  if (x.ndim() == 0 || b.ndim() != 1 || b.shape(0) != x.shape(-1))
    c.Fail("bias must be 1-D with the input's last dim (" + std::to_string(x.ndim() ? x.shape(-1) : 0) + ")");
  return mx::add(x, Up(c, bias_slot), c.stream);
}

/** 0.5 v (1 + erf(v / sqrt 2)) in float32, ORT's order: (v * 0.5) * (erf(v * (1/sqrt 2)) + 1). */
mx::array GeluErf(const mx::array& v, mx::Stream s) {
  if (v.dtype() == mx::float32 && RuntimeDevice() == mx::Device(mx::Device::cpu))
    if (auto y = ExpOnCpu(v, ExpForm::kGeluErf, s)) return *y;  // the same steps, one primitive
  const mx::array e = unary::Erf(mx::multiply(v, Scalar(M_SQRT1_2, mx::float32), s), s);
  return mx::multiply(mx::multiply(v, Scalar(0.5, mx::float32), s), mx::add(e, Scalar(1, mx::float32), s), s);
}

/** 1 / (1 + e^-x) in float32: MLX's on GPUs, the EP's primitive on the CPU backend (composed from
 *  the accurate Exp where that is switched off). */
mx::array Sigmoid(const mx::array& x, mx::Stream s) {
  if (RuntimeDevice() != mx::Device(mx::Device::cpu)) return mx::sigmoid(x, s);
  if (auto y = ExpOnCpu(x, ExpForm::kSigmoid, s)) return *y;
  const mx::array e = unary::Exp(mx::negative(mx::abs(x, s), s), s);  // exp(-|x|) in (0, 1]
  const mx::array den = mx::add(Scalar(1, mx::float32), e, s);
  return mx::where(mx::greater_equal(x, Scalar(0, mx::float32), s), mx::reciprocal(den, s),
                   mx::divide(e, den, s), s);
}

/** A claim that also checks a 1-D bias at `slot` (when present and its shape is known). */
template <size_t kSlot>
Claim ClaimWithBias(const NodeView& v) {
  if (Claim t = ClaimSameTypes(v); !t.ok) return t;
  if (v.has_input(kSlot))
    if (auto r = v.input_rank(kSlot); r && *r != 1) return Claim::No("bias is not 1-D");
  return Claim::Yes();
}

// ---- Gelu, BiasGelu, FastGelu, QuickGelu -------------------------------------------------------

std::vector<mx::array> TranslateGelu(const OpContext& c) { return Out(c, GeluErf(Up(c, 0), c.stream)); }

std::vector<mx::array> TranslateBiasGelu(const OpContext& c) {
  return Out(c, GeluErf(AddBias(c, Up(c, 0), 1), c.stream));
}

std::vector<mx::array> TranslateFastGelu(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array v = c.has_input(1) ? AddBias(c, Up(c, 0), 1) : Up(c, 0);
  // ORT's constants, as float: B = sqrt(2 / pi), C = 0.044715 * sqrt(2 / pi).
  const mx::array kB = Scalar(0.7978845608028654, mx::float32);
  const mx::array kC = Scalar(0.035677408136300125, mx::float32);
  const mx::array inner = mx::multiply(v, mx::add(mx::multiply(mx::multiply(kC, v, s), v, s), kB, s), s);
  const mx::array t = mx::add(unary::Tanh(inner, s), Scalar(1, mx::float32), s);
  return Out(c, mx::multiply(mx::multiply(v, Scalar(0.5, mx::float32), s), t, s));
}

std::vector<mx::array> TranslateQuickGelu(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array x = Up(c, 0);
  const float alpha = c.node.AttrFloat("alpha", 1.702f);
  // alpha = 1 is SiLU: x times the sigmoid of x itself, one pass on MLX's CPU device (SiluOnCpu).
  const mx::array z = alpha == 1.0f ? x : mx::multiply(x, Scalar(alpha, mx::float32), s);
  const mx::array sig = Sigmoid(z, s);
  if (auto y = SiluOnCpu(x, sig, s)) return Out(c, *y);
  return Out(c, mx::multiply(x, sig, s));
}

// ---- BiasAdd, BiasSplitGelu (diffusion models) -------------------------------------------------

Claim ClaimBiasAdd(const NodeView& v) {
  if (v.input_type(0) == ElemType::kBFloat16)
    return Claim::No(TypeReason(v, 0, "the schema takes float/float16"));
  if (auto r = v.input_rank(0); r && *r != 3) return Claim::No("X is not 3-D");
  return ClaimWithBias<1>(v);
}

std::vector<mx::array> TranslateBiasAdd(const OpContext& c) {
  const mx::array x = Up(c, 0);
  if (x.ndim() != 3 || c.input(2).shape() != x.shape()) c.Fail("X must be 3-D and skip of X's shape");
  return Out(c, mx::add(AddBias(c, x, 1), Up(c, 2), c.stream));
}

std::vector<mx::array> TranslateBiasSplitGelu(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array x = Up(c, 0);
  if (x.ndim() != 3 || x.shape(2) % 2 != 0) c.Fail("X must be 3-D with an even last dim");
  const mx::array v = AddBias(c, x, 1);
  const std::vector<mx::array> halves = mx::split(v, 2, 2, s);
  return Out(c, mx::multiply(halves[0], GeluErf(halves[1], s), s));
}

}  // namespace

void RegisterContribActivationOps(OpRegistry& r) {
  r.Add({kMsDomain, "Gelu", 1, 1, ClaimSameTypes, TranslateGelu});
  r.Add({kMsDomain, "BiasGelu", 1, 1, ClaimWithBias<1>, TranslateBiasGelu});
  r.Add({kMsDomain, "FastGelu", 1, 1, ClaimWithBias<1>, TranslateFastGelu});
  r.Add({kMsDomain, "QuickGelu", 1, 1, ClaimSameTypes, TranslateQuickGelu});
  r.Add({kMsDomain, "BiasAdd", 1, 1, ClaimBiasAdd, TranslateBiasAdd});
  r.Add({kMsDomain, "BiasSplitGelu", 1, 1, ClaimBiasAdd, TranslateBiasSplitGelu});
}

}  // namespace mlx_ep
