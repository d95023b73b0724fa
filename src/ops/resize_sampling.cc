// Resize family (see ops/resize.cc): attribute parsing and the per-axis sampling tables, computed on
// the host in float32 with ORT's CPU formulas (upsamplebase.h, upsample.cc, upsample_antialias.h),
// including where those promote to double, so that the same source rows and weights come out.
#include <algorithm>
#include <array>
#include <cmath>

#include "ops/resize_internal.h"

// The formulas are evaluated as written (ORT's are compiled without contraction): no fused
// multiply-adds.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

namespace mlx_ep {
namespace resize {
namespace {

bool ParseCoord(const std::string& s, Coord& c) {
  static const std::pair<const char*, Coord> kCoords[] = {
      {"half_pixel", Coord::kHalfPixel},
      {"half_pixel_symmetric", Coord::kHalfPixelSymmetric},
      {"pytorch_half_pixel", Coord::kPytorchHalfPixel},
      {"tf_half_pixel_for_nn", Coord::kTfHalfPixelForNn},
      {"align_corners", Coord::kAlignCorners},
      {"asymmetric", Coord::kAsymmetric},
      {"tf_crop_and_resize", Coord::kTfCropAndResize}};
  for (const auto& [name, value] : kCoords)
    if (s == name) {
      c = value;
      return true;
    }
  return false;
}

bool ParseNearest(const std::string& s, Nearest& n) {
  static const std::pair<const char*, Nearest> kModes[] = {{"", Nearest::kSimple},
                                                           {"round_prefer_floor", Nearest::kRoundPreferFloor},
                                                           {"round_prefer_ceil", Nearest::kRoundPreferCeil},
                                                           {"floor", Nearest::kFloor},
                                                           {"ceil", Nearest::kCeil}};
  for (const auto& [name, value] : kModes)
    if (s == name) {
      n = value;
      return true;
    }
  return false;
}

float OriginalCoordinate(Coord m, float x, float scale, float out_len, float in_len, float roi_lo,
                         float roi_hi) {
  switch (m) {
    case Coord::kAsymmetric:
      return x / scale;
    case Coord::kPytorchHalfPixel:
      return out_len > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case Coord::kTfHalfPixelForNn:
      return (x + 0.5f) / scale;
    case Coord::kAlignCorners:
      return out_len == 1 ? 0 : x * (in_len - 1) / (out_len - 1);
    case Coord::kTfCropAndResize:
      return out_len > 1 ? roi_lo * (in_len - 1) + (x * (roi_hi - roi_lo) * (in_len - 1)) / (out_len - 1)
                         : static_cast<float>(0.5 * (roi_lo + roi_hi) * (in_len - 1));
    case Coord::kHalfPixelSymmetric: {
      const float adjustment = out_len / (scale * in_len);
      const float offset = in_len / 2 * (1 - adjustment);
      return static_cast<float>(offset + (x + 0.5) / scale - 0.5);
    }
    case Coord::kHalfPixel:
    default:
      return ((x + 0.5f) / scale) - 0.5f;
  }
}

/** float -> int64 as ORT casts, kept defined for coordinates beyond int64 (absurd scales). */
int64_t ToInt64(float x) { return static_cast<int64_t>(std::clamp(x, -9.0e18f, 9.0e18f)); }

int64_t NearestPixel(Nearest m, float x, bool downsample) {
  switch (m) {
    case Nearest::kSimple:
      return downsample ? ToInt64(std::ceil(x)) : ToInt64(x);
    case Nearest::kFloor:
      return ToInt64(std::floor(x));
    case Nearest::kCeil:
      return ToInt64(std::ceil(x));
    case Nearest::kRoundPreferFloor:
    case Nearest::kRoundPreferCeil:
    default: {
      // ORT's kernel (measured: 1.31) counts a coordinate within 1e-6 of a half as a tie.
      const float floor_x = std::floor(x);
      if (std::fabs(x - floor_x - 0.5f) <= 1e-6f)
        return ToInt64(m == Nearest::kRoundPreferCeil ? std::ceil(x) : floor_x);
      return ToInt64(std::round(x));
    }
  }
}

/** Keys' cubic convolution weights of the 4 taps x_int-1 .. x_int+2 at fractional offset s. */
std::array<float, 4> CubicCoeffs(float s, float a) {
  const float t = std::abs(s);
  return {((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
          ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1,
          ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a};
}

/** The antialiasing filters (Pillow's, as ORT takes them). */
float Filter(Mode mode, float a, float x) {
  if (x < 0.0f) x = -x;
  if (mode == Mode::kLinear) return x < 1.0f ? 1.0f - x : 0.0f;
  if (x < 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1;
  if (x < 2.0f) return (((x - 5.0f) * x + 8.f) * x - 4.f) * a;
  return 0.0f;
}

AxisSampling Allocate(int taps, int64_t out, bool weighted) {
  AxisSampling s;
  s.taps = taps;
  s.index.assign(taps * out, 0);
  if (weighted) s.weight.assign(taps * out, 0.f);
  s.valid.assign(taps * out, 1);
  s.outside.assign(out, 0);
  return s;
}

/** The in-range taps [first, first + n) of one output row of the filtered sampling and their
 *  normalized weights, as ORT's compute_weight_coefficients leaves them. */
int64_t FilterWindow(const Attrs& a, int64_t in, float center, float support, float inv_scale, int64_t window,
                     std::vector<float>& w, int64_t& first) {
  const int64_t xmin_real = ToInt64(std::floor(center - support + 0.5f));
  int64_t xmax_real = ToInt64(std::floor(center + support + 0.5f));
  xmax_real = xmin_real + std::clamp<int64_t>(xmax_real - xmin_real, 0, window);
  const int64_t xmin_cut = std::clamp<int64_t>(xmin_real, 0, in),
                xmax_cut = std::clamp<int64_t>(xmax_real, 0, in);
  const int64_t xmin = a.exclude_outside ? xmin_cut : xmin_real;
  const int64_t count = (a.exclude_outside ? xmax_cut : xmax_real) - xmin;
  std::fill(w.begin(), w.end(), 0.f);
  float total = 0.0f;
  for (int64_t x = 0; x < count; ++x) {
    w[x] = Filter(a.mode, a.cubic_a, (static_cast<float>(x + xmin) - center + 0.5f) * inv_scale);
    total += w[x];
  }
  if (!a.exclude_outside && xmin_cut < xmax_cut) {
    // Taps outside the input add their weight to the border tap (the border is repeated).
    const int64_t neg = std::clamp<int64_t>(-xmin, 0, count - 1);
    for (int64_t x = 0; x < neg; ++x) w[neg] += w[x];
    const int64_t past = std::clamp<int64_t>(count + xmin - in, 0, count - 1);
    for (int64_t x = count - past; x < count; ++x) w[count - past - 1] += w[x];
    if ((neg | past) > 0)
      for (int64_t x = 0; x < xmax_cut - xmin_cut; ++x) w[x] = w[x + neg];
  }
  const float total_inv = total == 0.0f ? 1.0f : 1.0f / total;
  for (int64_t x = 0; x < xmax_cut - xmin_cut; ++x) w[x] = w[x] * total_inv;
  first = xmin_cut;
  return xmax_cut - xmin_cut;
}

}  // namespace

std::string ParseAttrs(const Node& n, Attrs& a) {
  const int ver = n.since_version;
  a.is_resize = n.op_type == "Resize";
  const std::string mode = n.AttrString("mode", "nearest");
  if (mode == "nearest")
    a.mode = Mode::kNearest;
  else if (mode == "linear")
    a.mode = Mode::kLinear;
  else if (mode == "cubic")
    a.mode = Mode::kCubic;
  else
    return "unknown mode '" + mode + "'";
  // Before opset 11 there is only asymmetric and the legacy nearest rounding.
  const std::string coord =
      ver > 10 ? n.AttrString("coordinate_transformation_mode", "half_pixel") : "asymmetric";
  if (!ParseCoord(coord, a.coord)) return "unknown coordinate_transformation_mode '" + coord + "'";
  const std::string nearest =
      a.mode == Mode::kNearest && ver >= 11 ? n.AttrString("nearest_mode", "round_prefer_floor") : "";
  if (!ParseNearest(nearest, a.nearest)) return "unknown nearest_mode '" + nearest + "'";
  a.cubic_a = n.AttrFloat("cubic_coeff_a", -0.75f);
  a.exclude_outside = n.AttrInt("exclude_outside", 0) != 0;
  a.extrapolation = n.AttrFloat("extrapolation_value", 0.f);
  if (ver >= 18) {
    a.antialias = n.AttrInt("antialias", 0) != 0;
    const std::string policy = n.AttrString("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch")
      a.policy = Policy::kStretch;
    else if (policy == "not_larger")
      a.policy = Policy::kNotLarger;
    else if (policy == "not_smaller")
      a.policy = Policy::kNotSmaller;
    else
      return "unknown keep_aspect_ratio_policy '" + policy + "'";
    a.axes = n.AttrInts("axes").value_or(std::vector<int64_t>{});
    for (int64_t ax : a.axes)
      if (ax < 0) return "negative axes (ORT's kernel uses them without normalizing)";
  }
  if (a.antialias && a.mode == Mode::kNearest) return "antialias with nearest mode (ORT rejects it)";
  if (a.exclude_outside && a.mode != Mode::kCubic && !(a.antialias && a.mode == Mode::kLinear))
    return "exclude_outside outside cubic or antialiased linear mode (ORT rejects it)";
  return "";
}

AxisSampling SampleAxis(const Attrs& a, int64_t in, int64_t out, float scale, float roi_lo, float roi_hi,
                        bool cubic_outer) {
  AxisSampling s = Allocate(a.mode == Mode::kNearest  ? 1
                            : a.mode == Mode::kLinear ? 2
                                                      : 4,
                            out, a.mode != Mode::kNearest);
  const bool extrapolate = a.coord == Coord::kTfCropAndResize;
  for (int64_t j = 0; j < out; ++j) {
    const float x = OriginalCoordinate(a.coord, static_cast<float>(j), scale, static_cast<float>(out),
                                       static_cast<float>(in), roi_lo, roi_hi);
    s.outside[j] = extrapolate && (x < 0 || x > static_cast<float>(in - 1));
    if (a.mode == Mode::kNearest) {
      s.index[j] =
          static_cast<int32_t>(std::clamp<int64_t>(NearestPixel(a.nearest, x, scale < 1), 0, in - 1));
    } else if (a.mode == Mode::kLinear) {
      const float v = std::max(0.0f, std::min(x, static_cast<float>(in - 1)));
      const int64_t x1 = std::min(ToInt64(v), in - 1), x2 = std::min(x1 + 1, in - 1);
      const bool same = x1 == x2;
      s.index[j] = static_cast<int32_t>(x1);
      s.index[out + j] = static_cast<int32_t>(x2);
      s.weight[j] = same ? 0.5f : std::fabs(v - x2);  // x1's weight is the distance to x2
      s.weight[out + j] = same ? 0.5f : std::fabs(v - x1);
    } else {
      const int64_t x_int = ToInt64(std::floor(x));
      std::array<float, 4> w = CubicCoeffs(x - x_int, a.cubic_a);
      float sum = 1;
      if (a.exclude_outside) {
        sum = 0;
        for (int i = 0; i < 4; ++i) {
          if (x_int - 1 + i < 0 || x_int - 1 + i >= in) w[i] = 0.0f;
          sum += w[i];
        }
      }
      // ORT: coeff / sum * x along the width, x * coeff / sum along the height.
      const bool divide_after = cubic_outer && a.exclude_outside;
      if (divide_after) {
        s.divisor.resize(out);
        s.divisor[j] = sum;
      }
      for (int i = 0; i < 4; ++i) {
        s.index[i * out + j] = static_cast<int32_t>(std::clamp<int64_t>(x_int - 1 + i, 0, in - 1));
        s.weight[i * out + j] = divide_after ? w[i] : w[i] / sum;
      }
    }
  }
  return s;
}

AxisSampling SampleAxisFiltered(const Attrs& a, int64_t in, int64_t out, float scale, float roi_lo,
                                float roi_hi) {
  // ORT's "scale" here is the inverse one (input/output); the filter widens when downscaling.
  const float inv = 1.0f / scale;
  const float half_support = a.mode == Mode::kCubic ? 2.0f : 1.0f;
  const float support = inv >= 1.0f ? half_support * inv : half_support;
  const int64_t window = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const float inv_scale = inv >= 1.0f ? 1.0f / inv : 1.0f;
  const bool extrapolate = a.coord == Coord::kTfCropAndResize;

  std::vector<float> w(window);
  std::vector<std::vector<float>> weights(out);
  std::vector<int64_t> first(out);
  std::vector<uint8_t> outside(out, 0);
  size_t taps = 1;
  for (int64_t j = 0; j < out; ++j) {
    const float center = 0.5f + (inv == 1.0f ? static_cast<float>(j)
                                             : OriginalCoordinate(a.coord, static_cast<float>(j), scale,
                                                                  static_cast<float>(out),
                                                                  static_cast<float>(in), roi_lo, roi_hi));
    outside[j] = extrapolate && (center - 0.5f < 0 || center - 0.5f > static_cast<float>(in - 1));
    const int64_t n = FilterWindow(a, in, center, support, inv_scale, window, w, first[j]);
    weights[j].assign(w.begin(), w.begin() + n);
    taps = std::max(taps, weights[j].size());
  }
  AxisSampling s = Allocate(static_cast<int>(taps), out, true);
  s.outside = std::move(outside);
  for (int64_t j = 0; j < out; ++j) {
    for (size_t t = 0; t < taps; ++t) {
      const bool valid = t < weights[j].size();
      const size_t k = t * out + j;
      s.index[k] = static_cast<int32_t>(valid ? first[j] + t : std::min<int64_t>(first[j], in - 1));
      s.weight[k] = valid ? weights[j][t] : 0.0f;
      s.valid[k] = valid;
    }
  }
  return s;
}

}  // namespace resize
}  // namespace mlx_ep
