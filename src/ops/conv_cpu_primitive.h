// What the EP's CPU convolution primitives share (ops/conv_im2col_cpu.cc, conv_depthwise_cpu.cc):
// a geometry, an activation applied to the finished values (conv_activation.h; none for the
// column matrix), equality by both, the convolution's (N, M, *O) output, and no GPU path.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/primitives.h"
#include "ops/conv_activation.h"
#include "ops/conv_internal.h"

namespace mlx_ep::conv_util {

/** The base of a CPU convolution primitive of geometry `Geometry` (a Geometry2d). */
template <class Geometry>
class ConvCpuPrimitive : public mx::UnaryPrimitive {
 public:
  ConvCpuPrimitive(mx::Stream stream, Geometry d, ConvActivation act)
      : mx::UnaryPrimitive(stream), d_(d), act_(act) {}

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string(name()) + " runs on the CPU only (GPUs take mx::conv_general)");
  }

  // MLX compares primitives of the same type only (typeid first), so `other` is this class.
  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const ConvCpuPrimitive&>(other);
    return d_ == o.d_ && act_ == o.act_;
  }

  const Geometry& geometry() const { return d_; }
  const ConvActivation& activation() const { return act_; }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {OutputShape2d(d_, inputs[0].shape(0), inputs[1].shape(0))};
  }

 protected:
  Geometry d_;
  ConvActivation act_;  // applied to the values the task has just written
};

}  // namespace mlx_ep::conv_util
