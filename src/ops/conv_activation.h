// An activation applied by the convolution before it (ops/conv_im2col_cpu.cc, ConvGemmCpu, and
// ops/conv_depthwise_cpu.cc, DepthwiseConvCpu), on MLX's CPU device: Relu, Clip with constant bounds,
// HardSigmoid, HardSwish, LeakyRelu and SiLU (Mul of x and Sigmoid(x)) after a Conv, as ORT's CPU EP fuses
// them (FusedConv). The activation runs in the convolution's task on each block of rows the product has just
// written (in cache), instead of a primitive of its own and a pass over the whole output. The values are the
// composed forms' (the same comparisons, NaN kept as MLX's maximum / minimum keep it).
#pragma once

#include <cstdint>
#include <optional>

#include "ops/op.h"

namespace mlx_ep {

/** An activation and its parameters. */
struct ConvActivation {
  enum class Kind { kNone, kRelu, kClip, kHardSigmoid, kHardSwish, kLeakyRelu, kSilu };
  Kind kind = Kind::kNone;
  float a = 0.f;  ///< Clip: the lower bound; HardSigmoid / HardSwish / LeakyRelu: alpha
  float b = 0.f;  ///< Clip: the upper bound; HardSigmoid / HardSwish: beta
  bool operator==(const ConvActivation&) const = default;
};

/** `x` with `act` applied, as the convolution that computes `x` with the activation in its task,
 *  where `x` is the float32 output of such a convolution still to evaluate, without one yet; else
 *  nullopt. The caller makes sure nothing else reads `x` (OpContext::readers): it is not computed
 *  twice. */
std::optional<mx::array> ActivatedConv(const mx::array& x, const ConvActivation& act);

/** `act` of n float32 values in place, as the composed form computes it (the convolution
 *  primitives' tasks call it on each block of rows they have just written). */
void ActivateValues(const ConvActivation& act, float* y, int64_t n);

/** ActivatedConv of input `i` of `c`'s node when the node is that input's only reader. */
inline std::optional<mx::array> ActivatedConvInput(const OpContext& c, size_t i, const ConvActivation& act) {
  if (c.readers(i) != 1) return std::nullopt;
  return ActivatedConv(c.input(i), act);
}

}  // namespace mlx_ep
