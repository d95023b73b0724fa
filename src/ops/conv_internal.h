// Helpers shared by Conv (ops/conv.cc) and ConvTranspose (ops/conv_transpose.cc): attribute
// checks for the claims, the channels-first <-> channels-last transposes and the grouped
// channels-last convolution both translations end in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/conv_activation.h"
#include "ops/op.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace conv_util {

/** ONNX's auto_pad modes. */
enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

/** The auto_pad attribute; nullopt for a value ONNX does not define. */
std::optional<AutoPad> ReadAutoPad(const Node& n);

/** Why a Conv / ConvTranspose node (`transpose`) cannot be claimed, or "" when it can: types,
 *  ranks (1-3 spatial dims) and the attributes ORT's CPU kernels accept. */
std::string ClaimReason(const NodeView& v, bool transpose);

/** The resolved attributes of a node for `nd` spatial dims and weights `w` (translation time):
 *  every list has nd entries (pads: 2*nd), defaults filled in; fails on inconsistent ones. */
struct ConvAttrs {
  AutoPad auto_pad = AutoPad::kNotSet;
  int group = 1;
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::vector<int64_t> output_padding;  ///< ConvTranspose only
  std::vector<int64_t> output_shape;    ///< ConvTranspose only; empty when absent
};
ConvAttrs ReadAttrs(const OpContext& c, const mx::array& x, const mx::array& w, bool transpose);

/** (N, C, *S) -> (N, *S, C). */
mx::array ToChannelsLast(const mx::array& a, mx::Stream s);
/** (N, *S, C) -> (N, C, *S). */
mx::array ToChannelsFirst(const mx::array& a, mx::Stream s);

/** mx::conv_general on channels-last input (N, *S, C) and weights (O, *K, C/groups), also for
 *  grouped 3-D convolutions (which conv_general lacks: one convolution per group, concatenated). */
mx::array ConvChannelsLast(const mx::array& x, const mx::array& w, const std::vector<int>& strides,
                           const std::vector<int>& lo, const std::vector<int>& hi,
                           const std::vector<int>& kernel_dilation, const std::vector<int>& input_dilation,
                           int groups, bool flip, mx::Stream s);

/** The resolved geometry of a convolution, per spatial dim: paddings (negative ones crop) and
 *  output sizes. */
struct ConvGeometry {
  std::vector<int> kernel, strides, dilations, lo, hi, out;
};

/** Convolution on MLX's CPU device (ops/conv_cpu.cc) in ONNX's layout: X (N, C, *S) and
 *  W (M, C/groups, *K) to (N, M, *O), plus `bias` (M values of X's dtype) when given; im2col +
 *  matmul (BLAS; with a bias and one group BLAS adds it: a column of W against a row of ones in
 *  the column matrix, or mx::addmm), or for depthwise
 *  convolutions a sum over kernel positions, instead of mx::conv_general. */
mx::array ConvCpu(const mx::array& x, const mx::array& w, int groups, const ConvGeometry& g, mx::Stream s,
                  const std::optional<mx::array>& bias = std::nullopt);

/** A 1-D or 2-D convolution's geometry as 2-D (a 1-D one has height 1), for the CPU primitives. */
struct Geometry2d {
  int64_t in_h = 1, in_w = 1, out_h = 1, out_w = 1;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int pad_h = 0, pad_w = 0;  ///< head paddings; negative ones crop
  int spatial_dims = 2;      ///< the node's: 1 or 2
  bool operator==(const Geometry2d&) const = default;
};

/** `g` over X (N, C, *S) as Geometry2d; nullopt for 3-D convolutions. */
std::optional<Geometry2d> As2d(const mx::array& x, const ConvGeometry& g);

/** The output shape (N, M, *O) of a convolution of geometry `d`: O is (out_h, out_w), or (out_w)
 *  for a 1-D one. */
mx::Shape OutputShape2d(const Geometry2d& d, int batch, int channels);

/** The column matrix (N, G, C/G * prod(K), prod(O)) of a 1-D or 2-D convolution of float32 X
 *  (N, C, *S), the padding as zeros, as one primitive of the EP's on MLX's CPU stream
 *  (ops/conv_im2col_cpu.cc; row (c, ky, kx) of a group holds input channel c at kernel position
 *  (ky, kx) for every output position, as ConvCpu's strided view reshaped); `ones_row` (one group
 *  only): one more row of ones, so that a bias column of W adds the bias in the product itself.
 *  nullopt elsewhere or with ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL=0 (the Pad, strided view and copy
 *  of ConvCpu). */
std::optional<mx::array> Im2ColOnCpu(const mx::array& x, int groups, const ConvGeometry& g, mx::Stream s,
                                     bool ones_row = false);

/** A 1-D or 2-D dense or grouped convolution of float32 X (N, C, *S) and W (M, C/groups, *K),
 *  plus `bias` (M float32 values) when given, to Y (N, M, *O) as one primitive of the EP's on
 *  MLX's CPU stream (ops/conv_im2col_cpu.cc): the column matrix and its product in the EP's BLAS
 *  (blas.h). nullopt elsewhere, without that BLAS (macOS: MLX's Accelerate) or with
 *  ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL=0. */
std::optional<mx::array> ConvGemmOnCpu(const mx::array& x, const mx::array& w, int groups,
                                       const ConvGeometry& g, mx::Stream s,
                                       const std::optional<mx::array>& bias = std::nullopt);

/** A 1-D or 2-D depthwise convolution (X (N, groups, *S), W (M, 1, *K), float32) as one primitive
 *  of the EP's on MLX's CPU stream (ops/conv_depthwise_cpu.cc), X unpadded, plus `bias` (M float32
 *  values) when given; nullopt elsewhere (other devices, dtypes or ranks) or with
 *  ONNXRUNTIME_EP_MLX_CONV_CPU_KERNEL=0 (ConvCpu's composed sum). */
std::optional<mx::array> DepthwiseConvOnCpu(const mx::array& x, const mx::array& w, int groups,
                                            const ConvGeometry& g, mx::Stream s,
                                            const std::optional<mx::array>& bias = std::nullopt);

/** `x` (a DepthwiseConvOnCpu output still to evaluate, without an activation) with `act` applied
 *  in the primitive's task (conv_activation.h); nullopt for any other array. */
std::optional<mx::array> ActivatedDepthwiseConv(const mx::array& x, const ConvActivation& act);

/** The dtype a node computes in: float32 for float16/bfloat16 nodes with a bias (conv + bias then
 *  round once, as ORT's float kernels do), else the input dtype (MLX's convolution accumulates in
 *  float32 and rounds once). */
mx::Dtype ComputeDtype(const OpContext& c, mx::Dtype dt);

/** The bias (input 2) as a vector of `m` values of dtype `dt`; fails unless B is (m,). */
mx::array Bias(const OpContext& c, int m, mx::Dtype dt);

/** The channels-last result `y` (N, *S, M) plus the bias (input 2, if any), cast to `dt` and
 *  transposed to channels-first. */
mx::array FinishOutput(const OpContext& c, mx::array y, mx::Dtype dt);

/** Channels-first `y` (N, M, *S) plus the bias (input 2, if any) in y's dtype. */
mx::array AddBiasChannelsFirst(const OpContext& c, const mx::array& y);

/** The output of a node with no terms to sum (an empty batch, no input channels, ...): zeros, or
 *  the bias broadcast, of channels-first `shape`. */
mx::array EmptyConvOutput(const OpContext& c, const mx::Shape& shape, mx::Dtype dt);

/** Registers ConvTranspose (ops/conv_transpose.cc); called by RegisterConvOps. */
void AddConvTranspose(OpRegistry& r);

/** int64 -> int for MLX, failing on values out of int range. */
int ToInt(const OpContext& c, int64_t v, const char* what);

}  // namespace conv_util
}  // namespace mlx_ep
