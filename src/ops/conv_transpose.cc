// ConvTranspose (part of the convolution family, ops/conv.cc), 1-D to 3-D.
//
//  - Computed as a stride-1 convolution over the input dilated by the strides, with the kernel
//    flipped and padded by dilation * (kernel - 1) - pad on each side (mx::conv_general's
//    input_dilation and flip). W (C, M/group, *K) is regrouped to conv_general's (M, *K, C/group).
//    Pads larger than the dilated kernel would be negative paddings, which conv_general applies
//    to the undilated input; they are applied here by cropping the output instead.
//  - Output size and pads follow ORT's CPU kernel (conv_transpose_attributes.h), which matches the
//    ONNX spec: with output_shape (or SAME_*, whose target is in * stride) the total padding is
//    max(0, full - target), split with the odd pixel at the beginning except for SAME_UPPER; an
//    output_shape larger than the full output adds zeros (plus bias) at the end; output_padding
//    adds output at the end. Explicit pads (NOTSET, VALID) crop the full output.
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

std::vector<mx::array> TranslateConvTranspose(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::array& w = c.input(1);
  const ConvAttrs a = ReadAttrs(c, x, w, /*transpose=*/true);
  const int nd = static_cast<int>(x.ndim()) - 2;
  const int channels = x.shape(1);
  if (w.shape(0) != channels) c.Fail("W's first dim differs from X's channels");
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

  const mx::Dtype ct = ComputeDtype(c, dt);
  const mx::array xl = ToChannelsLast(mx::astype(x, ct, s), s);
  const mx::array wl = RegroupWeights(mx::astype(w, ct, s), a.group, s);
  mx::array y = ConvChannelsLast(xl, wl, std::vector<int>(nd, 1), lo, hi, dilations, strides, a.group,
                                 /*flip=*/true, s);
  bool crop = false;
  mx::Shape start(y.ndim(), 0), stop = y.shape();
  for (int i = 0; i < nd; ++i) {
    start[1 + i] = crop_start[i];
    stop[1 + i] = crop_start[i] + out_shape[2 + i];
    crop = crop || start[1 + i] != 0 || stop[1 + i] != y.shape(1 + i);
  }
  if (crop) y = mx::slice(y, start, stop, s);
  return {FinishOutput(c, y, dt)};
}

}  // namespace

namespace conv_util {

void AddConvTranspose(OpRegistry& r) {
  r.Add({"", "ConvTranspose", 1, 10, ClaimConvTranspose, TranslateConvTranspose});
  r.Add({"", "ConvTranspose", 11, 25, ClaimConvTranspose, TranslateConvTranspose});
}

}  // namespace conv_util
}  // namespace mlx_ep
