// Declarations shared by the files of the resize op family (ops/resize.cc, ops/resize_sampling.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mlx_ep {
namespace resize {

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kTfHalfPixelForNn,
  kAlignCorners,
  kAsymmetric,
  kTfCropAndResize
};
enum class Nearest { kSimple, kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };
enum class Policy { kStretch, kNotLarger, kNotSmaller };

/** A Resize/Upsample node's attributes, as ORT's kernel reads them for the node's opset. */
struct Attrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kAsymmetric;
  Nearest nearest = Nearest::kSimple;
  Policy policy = Policy::kStretch;
  float cubic_a = -0.75f;
  bool exclude_outside = false;
  bool antialias = false;
  float extrapolation = 0.f;
  bool is_resize = true;
  std::vector<int64_t> axes;  // opset 18+, as written (ORT does not normalize them)
};

/** Fills `a` from the node; returns "" or why ORT's kernel would not run it / it is declined. */
std::string ParseAttrs(const Node& n, Attrs& a);

/** How one axis is resampled: output j reads `taps` source rows index[t][j] with weight[t][j]
 *  (taps past a row's window have valid[t][j] = 0 and add nothing). */
struct AxisSampling {
  int taps = 1;
  std::vector<int32_t> index;    // [taps][out]
  std::vector<float> weight;     // [taps][out]; empty for nearest (no weights)
  std::vector<uint8_t> valid;    // [taps][out]
  std::vector<float> divisor;    // [out]: when set, each tap is (x * weight) / divisor
  std::vector<uint8_t> outside;  // [out]: 1 where tf_crop_and_resize writes extrapolation_value
};

/** ORT's per-axis sampling of nearest/linear/cubic (upsample.cc): `scale` is the axis's scale,
 *  roi_lo/roi_hi its roi (tf_crop_and_resize only). `cubic_outer`: the outer (height) axis of cubic,
 *  whose exclude_outside renormalization ORT applies after the multiplication. */
AxisSampling SampleAxis(const Attrs& a, int64_t in, int64_t out, float scale, float roi_lo, float roi_hi,
                        bool cubic_outer);

/** ORT's antialiasing filter sampling (upsample_antialias.h; also its NHWC cubic path): a
 *  triangle or Keys cubic filter widened by the downscale factor, normalized per output row. */
AxisSampling SampleAxisFiltered(const Attrs& a, int64_t in, int64_t out, float scale, float roi_lo,
                                float roi_hi);

}  // namespace resize
}  // namespace mlx_ep
