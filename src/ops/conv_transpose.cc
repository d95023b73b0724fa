// ConvTranspose (part of the convolution family, ops/conv.cc), 1-D to 3-D.
//
//  - Computed as a stride-1 convolution over the input dilated by the strides (stride - 1 zeros
//    between neighbours, DilateInput), with the kernel flipped and padded by
//    dilation * (kernel - 1) - pad on each side (mx::conv_general's flip). W (C, M/group, *K) is
//    regrouped to conv_general's (M, *K, C/group). Pads larger than the dilated kernel would be
//    negative paddings; they are applied here by cropping the output instead.
//  - Output size and pads follow ORT's CPU kernel (conv_transpose_attributes.h), which matches the
//    ONNX spec: with output_shape (or SAME_*, whose target is in * stride) the total padding is
//    max(0, full - target), split with the odd pixel at the beginning except for SAME_UPPER; an
//    output_shape larger than the full output adds zeros (plus bias) at the end; output_padding
//    adds output at the end. Explicit pads (NOTSET, VALID) crop the full output.
//  - On MLX's CPU device the same convolution runs through ConvCpu (ops/conv_cpu.cc) in ONNX's
//    layout: X dilated the same way, W regrouped to (M, C/group, *K) and flipped. (Not through
//    conv_general's input_dilation on GPUs: MLX's CUDA convolution caches its cuDNN graphs by a
//    key that lacks the input dilation; see TranslateConvTranspose.)
//  - output_padding >= stride is declined (ORT's CPU EP rejects it); an output_shape that does not
//    map back to X's size fails, as in ORT.
#include <algorithm>

#include "ops/claim_util.h"
#include "ops/conv_internal.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

using namespace conv_util;

Claim ClaimConvTranspose(const NodeView& v) {
  std::string reason = ClaimReason(v, /*transpose=*/true);
  return reason.empty() ? Claim::Yes() : Claim::No(std::move(reason));
}

/** Leading padding (may exceed the dilated kernel) and output size of one spatial dim. */
struct TransposeDim {
  int64_t head, out;
};

TransposeDim TransposeDimOf(const OpContext& c, const ConvAttrs& a, int i, int64_t in) {
  const int nd = static_cast<int>(a.kernel.size());
  const int64_t s = a.strides[i], dk = a.dilations[i] * (a.kernel[i] - 1) + 1;
  const int64_t full = (in - 1) * s + dk + a.output_padding[i];
  const bool same = a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
  if (!a.output_shape.empty() || same) {
    const int64_t target = a.output_shape.empty() ? in * s : a.output_shape[i];
    if (target < 1) c.Fail("output_shape holds " + std::to_string(target));
    const int64_t total = std::max<int64_t>(0, full - target);
    const int64_t head = a.auto_pad == AutoPad::kSameUpper ? total / 2 : total - total / 2;
    if (!a.output_shape.empty() && (target + total - dk) / s + 1 != in)
      c.Fail("output_shape " + std::to_string(target) + " is inconsistent with an input of size " +
             std::to_string(in) + " (spatial dim " + std::to_string(i) + ")");
    return {head, a.output_shape.empty() ? full - total : target};
  }
  const int64_t head = a.auto_pad == AutoPad::kValid ? 0 : a.pads[i];
  const int64_t tail = a.auto_pad == AutoPad::kValid ? 0 : a.pads[nd + i];
  if (full - head - tail < 1) c.Fail("pads leave no output in spatial dim " + std::to_string(i));
  return {head, full - head - tail};
}

/** W (C, M/group, *K) -> (M, *K, C/group), the weights of the equivalent convolution. */
mx::array RegroupWeights(const mx::array& w, int groups, mx::Stream s) {
  const int c = w.shape(0), m_per_group = w.shape(1);
  mx::Shape split = {groups, c / groups, m_per_group};
  split.insert(split.end(), w.shape().begin() + 2, w.shape().end());
  std::vector<int> perm = {0, 2};
  for (int i = 3; i < static_cast<int>(split.size()); ++i) perm.push_back(i);
  perm.push_back(1);  // (group, M/group, *K, C/group)
  mx::Shape out = {groups * m_per_group};
  out.insert(out.end(), w.shape().begin() + 2, w.shape().end());
  out.push_back(c / groups);
  return mx::reshape(mx::transpose(mx::reshape(w, split, s), perm, s), out, s);
}

/** W (C, M/group, *K) -> (M, C/group, *K) with the kernel flipped: the channels-first weights of
 *  the equivalent convolution (ConvCpu). */
mx::array FlippedWeights(const mx::array& w, int groups, mx::Stream s) {
  const int c = w.shape(0), m_per_group = w.shape(1), nd = static_cast<int>(w.ndim()) - 2;
  mx::Shape split = {groups, c / groups, m_per_group};
  split.insert(split.end(), w.shape().begin() + 2, w.shape().end());
  std::vector<int> perm = {0, 2, 1};
  for (int i = 0; i < nd; ++i) perm.push_back(3 + i);  // (group, M/group, C/group, *K)
  mx::Shape out = {groups * m_per_group, c / groups};
  out.insert(out.end(), w.shape().begin() + 2, w.shape().end());
  mx::array r = mx::reshape(mx::transpose(mx::reshape(w, split, s), perm, s), out, s);
  for (int i = 0; i < nd; ++i) {
    const int k = r.shape(2 + i);
    if (k > 1) r = mx::take(r, mx::arange(k - 1, -1, -1, mx::int32, s), 2 + i, s);
  }
  return r;
}

/** X (N, C, *S) with stride - 1 zeros between neighbours along each spatial dim. */
mx::array DilateInput(mx::array x, const std::vector<int>& strides, mx::Stream s) {
  for (int i = 0; i < static_cast<int>(strides.size()); ++i) {
    if (strides[i] == 1) continue;
    const int axis = 2 + i, size = x.shape(axis);
    x = mx::pad(mx::expand_dims(x, axis + 1, s), {axis + 1}, {0}, {strides[i] - 1}, mx::array(0, x.dtype()),
                "constant", s);
    mx::Shape merged = x.shape();
    merged.erase(merged.begin() + axis + 1);
    merged[axis] = size * strides[i];
    x = mx::reshape(x, merged, s);
    mx::Shape stop = x.shape();
    stop[axis] = (size - 1) * strides[i] + 1;
    x = mx::slice(x, mx::Shape(x.ndim(), 0), stop, s);
  }
  return x;
}

/** On MLX's CPU device: the equivalent stride-1 convolution over the dilated input through
 *  ConvCpu (im2col + matmul), in channels-first layout; returns (N, M, *full). */
mx::array ConvTransposeCpu(const mx::array& x, const mx::array& w, const ConvAttrs& a,
                           const std::vector<int>& strides, const std::vector<int>& dilations,
                           const std::vector<int>& lo, const std::vector<int>& hi, mx::Stream s) {
  const mx::array xd = DilateInput(x, strides, s);
  const mx::array wf = FlippedWeights(w, a.group, s);
  const int nd = static_cast<int>(strides.size());
  ConvGeometry g{{}, std::vector<int>(nd, 1), dilations, lo, hi, {}};
  for (int i = 0; i < nd; ++i) {
    g.kernel.push_back(wf.shape(2 + i));
    g.out.push_back(xd.shape(2 + i) + lo[i] + hi[i] - dilations[i] * (g.kernel[i] - 1));
  }
  return ConvCpu(xd, wf, a.group, g, s);
}

std::vector<mx::array> TranslateConvTranspose(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::array& w = c.input(1);
  const ConvAttrs a = ReadAttrs(c, x, w, /*transpose=*/true);
  const int nd = static_cast<int>(x.ndim()) - 2;
  const int channels = x.shape(1);
  if (w.shape(0) != channels) c.Fail("W's first dim differs from X's channels");
  for (int i = 2; i < static_cast<int>(w.ndim()); ++i)
    if (w.shape(i) <= 0) c.Fail("Kernel size must be positive");  // as ORT
  if (channels % a.group != 0) c.Fail("X's channels are not divisible by group");
  const int m = w.shape(1) * a.group;

  // Paddings of the equivalent convolution; negative ones are cropped from its output.
  std::vector<int> strides, dilations, lo, hi, crop_start;
  mx::Shape out_shape = {x.shape(0), m};
  for (int i = 0; i < nd; ++i) {
    const int64_t in = x.shape(2 + i), dk = a.dilations[i] * (a.kernel[i] - 1);
    const TransposeDim dim = TransposeDimOf(c, a, i, in);
    const int64_t pad_lo = dk - dim.head;
    const int64_t pad_hi = dim.out + dim.head - (in - 1) * a.strides[i] - 1;
    strides.push_back(ToInt(c, a.strides[i], "stride"));
    dilations.push_back(ToInt(c, a.dilations[i], "dilation"));
    lo.push_back(ToInt(c, std::max<int64_t>(pad_lo, 0), "pad"));
    hi.push_back(ToInt(c, std::max<int64_t>(pad_hi, 0), "pad"));
    crop_start.push_back(ToInt(c, std::max<int64_t>(-pad_lo, 0), "pad"));
    out_shape.push_back(ToInt(c, dim.out, "output size"));
  }
  const mx::Dtype dt = x.dtype();
  if (x.size() == 0 || w.size() == 0) return {EmptyConvOutput(c, out_shape, dt)};

  // The CPU path sums in float32 for float16/bfloat16 (matmul, depthwise sum), rounding once.
  const bool cpu = RuntimeDevice() == mx::Device(mx::Device::cpu);
  const mx::Dtype ct = cpu && dt != mx::float32 ? mx::float32 : ComputeDtype(c, dt);
  // The spatial axes start at 1 channels-last (conv_general), at 2 channels-first (CPU path).
  const int first = cpu ? 2 : 1;
  // On GPUs X is dilated here too, not through conv_general's input_dilation: MLX's CUDA
  // convolution caches its cuDNN graph by a key without the input dilation (nor the output shape),
  // so a later convolution that differs only in its strides ran the earlier one's graph (wrong
  // values, and a write past the output for a larger one's).
  mx::array y =
      cpu ? ConvTransposeCpu(mx::astype(x, ct, s), mx::astype(w, ct, s), a, strides, dilations, lo, hi, s)
          : ConvChannelsLast(ToChannelsLast(DilateInput(mx::astype(x, ct, s), strides, s), s),
                             RegroupWeights(mx::astype(w, ct, s), a.group, s), std::vector<int>(nd, 1), lo,
                             hi, dilations, std::vector<int>(nd, 1), a.group, /*flip=*/true, s);
  bool crop = false;
  mx::Shape start(y.ndim(), 0), stop = y.shape();
  for (int i = 0; i < nd; ++i) {
    start[first + i] = crop_start[i];
    stop[first + i] = crop_start[i] + out_shape[2 + i];
    crop = crop || start[first + i] != 0 || stop[first + i] != y.shape(first + i);
  }
  if (crop) y = mx::slice(y, start, stop, s);
  if (!cpu) return {FinishOutput(c, y, dt)};
  return {mx::astype(AddBiasChannelsFirst(c, y), dt, s)};
}

}  // namespace

namespace conv_util {

void AddConvTranspose(OpRegistry& r) {
  r.Add({"", "ConvTranspose", 1, 10, ClaimConvTranspose, TranslateConvTranspose});
  r.Add({"", "ConvTranspose", 11, 25, ClaimConvTranspose, TranslateConvTranspose});
}

}  // namespace conv_util
}  // namespace mlx_ep
