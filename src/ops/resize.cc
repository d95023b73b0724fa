// Op family: Resize (opsets 10, 11-12, 13-17, 18, 19+) and Upsample (7-8 scales attribute, 9 scales
// input), as ORT's CPU kernel (upsamplebase.h, upsample.cc, upsample_antialias.h) computes them:
//  - The output size comes from scales (floor(scale * size), in float32) or sizes (then scale =
//    size_out / size_in, and keep_aspect_ratio_policy may rescale the resized axes); it is fixed when
//    tracing, so scales/sizes/roi are host inputs.
//  - Resampling is separable, innermost axis first: each axis is a gather of source rows with
//    weights computed on the host by ORT's formulas (ops/resize_sampling.cc), applied as a chain of
//    take * weight + ..., in ORT's order. Axes whose scale is 1 are left alone, as ORT does; if no dim
//    changes at all the input is returned unchanged.
//  - linear/cubic compute in float32 and round once to float16/bfloat16, like ORT's float
//    accumulation; its antialias path (also taken by NHWC cubic) stores each axis's result in the
//    input type, so that rounding happens after every axis there too. ORT's integer linear/cubic
//    paths (fixed-point weights) are declined.
//  - tf_crop_and_resize writes extrapolation_value where any resized axis maps outside the input.
//  - ORT only runs linear on 2-D/3-D inputs and on 4-D/5-D ones whose outer scales are 1, and cubic
//    on 2-D and 4-D ones (NCHW, or NHWC when upscaling or antialiased); other shapes fail there and
//    fail here.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/resize_internal.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

using namespace resize;  // NOLINT: the family's own types
using shape_util::Dims;

/** Longest chain of take * weight + ... per axis; wider antialias windows gather all taps at once. */
constexpr int kMaxChainTaps = 32;

std::vector<float> TensorFloats(const Tensor& t) {
  std::vector<float> v(t.type == ElemType::kFloat ? t.bytes.size() / sizeof(float) : 0);
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Claims

/** True when the claim can tell that a rank-4 input is resized NCHW-wise (outer two scales 1). */
bool KnownNchw(const NodeView& v, const Attrs& a) {
  const auto shape = v.input_shape(0);
  if (!shape) return false;
  if (shape->size() != 4) return true;
  const int ver = v.node().since_version;
  const size_t scales_at = ver >= 11 ? 2 : 1;
  auto outer = [&](size_t i) { return a.axes.empty() ? i < 2 : a.axes[i] < 2; };
  if (const Tensor* t = v.has_input(scales_at) ? v.constant_input(scales_at) : nullptr;
      t && t->NumElements() > 0) {
    const std::vector<float> s = TensorFloats(*t);
    if (!a.axes.empty() && s.size() != a.axes.size()) return false;
    for (size_t i = 0; i < s.size(); ++i)
      if (outer(i) && s[i] != 1.0f) return false;
    return !s.empty();
  }
  if (const Tensor* t = ver >= 11 && v.has_input(3) ? v.constant_input(3) : nullptr;
      t && a.policy == Policy::kStretch) {
    const std::vector<int64_t> sizes = t->ToInt64();
    if (!a.axes.empty() && sizes.size() != a.axes.size()) return false;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t axis = a.axes.empty() ? i : a.axes[i];
      if (outer(i) && (axis >= 4 || (*shape)[axis] < 0 || sizes[i] != (*shape)[axis])) return false;
    }
    return !sizes.empty();
  }
  return false;
}

Claim ClaimResizeLike(const NodeView& v) {
  Attrs a;
  if (std::string why = ParseAttrs(v.node(), a); !why.empty()) return Claim::No(why);
  const ElemType t = v.input_type(0);
  if (a.mode != Mode::kNearest && !IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0, "linear/cubic are computed for float32, float16 and bfloat16 only"));
  // ORT's antialias/NHWC-cubic path writes extrapolation values as if the data were NCHW.
  if (a.coord == Coord::kTfCropAndResize && (a.antialias || a.mode == Mode::kCubic) && !KnownNchw(v, a))
    return Claim::No("tf_crop_and_resize with antialias or cubic on a possibly NHWC-resized input");
  const int ver = v.node().since_version;
  if (!a.is_resize && ver < 9) {
    if (!v.node().Attr("scales")) return Claim::No("attribute scales is missing");
    return Claim::Yes();
  }
  const size_t scales_at = ver >= 11 ? 2 : 1;
  std::vector<size_t> host;
  if (ver >= 11 && a.coord == Coord::kTfCropAndResize && v.has_input(1)) {
    if (v.input_type(1) != ElemType::kFloat) return Claim::No(TypeReason(v, 1, "ORT reads roi as float32"));
    host.push_back(1);
  }
  if (v.has_input(scales_at)) {
    if (v.input_type(scales_at) != ElemType::kFloat) return Claim::No(TypeReason(v, scales_at, "scales"));
    host.push_back(scales_at);
  }
  if (ver >= 11 && v.has_input(3)) {
    if (v.input_type(3) != ElemType::kInt64) return Claim::No(TypeReason(v, 3, "sizes"));
    host.push_back(3);
  }
  if (!v.has_input(scales_at) && !(ver >= 11 && v.has_input(3)))
    return Claim::No("neither scales nor sizes given");
  return Claim::Yes(host);
}

// ---------------------------------------------------------------------------------------------
// Output geometry

std::vector<float> HostFloats(const OpContext& c, size_t i) {
  if (c.host(i).type != ElemType::kFloat) c.Fail("input " + std::to_string(i) + " must be float32");
  return TensorFloats(c.host(i));
}

/** A full-rank vector from values given for `axes` (ORT's opset-18 rule), or `values` as they are. */
std::vector<float> ExpandToRank(const OpContext& c, const std::vector<float>& values,
                                const std::vector<int64_t>& axes, size_t rank, const char* what) {
  if (axes.empty()) {
    if (values.size() != rank) c.Fail(std::string(what) + " must hold one value per input dimension");
    return values;
  }
  if (values.size() != axes.size()) c.Fail(std::string(what) + " must hold one value per axis");
  std::vector<float> full(rank, 1.0f);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] >= static_cast<int64_t>(rank)) c.Fail("axes must be less than the input rank");
    full[axes[i]] = values[i];
  }
  return full;
}

/** ORT's AdjustOutputSizeAsPolicy: one scale (the smallest or largest) for every resized axis. */
void ApplyPolicy(const Attrs& a, const std::vector<int64_t>& dims, std::vector<float>& scales,
                 std::vector<int64_t>& out) {
  if (a.policy == Policy::kStretch) return;
  auto resized = [&](size_t i) {
    return a.axes.empty() || std::find(a.axes.begin(), a.axes.end(), static_cast<int64_t>(i)) != a.axes.end();
  };
  const bool smallest = a.policy == Policy::kNotLarger;
  float s = smallest ? std::numeric_limits<float>::max() : std::numeric_limits<float>::min();
  for (size_t i = 0; i < scales.size(); ++i)
    if (resized(i)) s = smallest ? std::min(s, scales[i]) : std::max(s, scales[i]);
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = resized(i) ? s : 1.0f;
    out[i] = resized(i) ? static_cast<int64_t>(std::round(s * dims[i])) : dims[i];
  }
}

/** ORT's ScalesValidation: scale ranges and the input shapes its linear/cubic kernels handle. */
void ValidateScales(const OpContext& c, const Attrs& a, const std::vector<float>& s) {
  for (float x : s)
    if (a.is_resize ? !(x > 0) : !(x >= 1))
      c.Fail(a.is_resize ? "scales must be > 0" : "scales must be >= 1");
  const size_t r = s.size();
  const bool nchw = r == 4 && s[0] == 1 && s[1] == 1, nhwc = r == 4 && s[0] == 1 && s[3] == 1;
  if (a.mode == Mode::kLinear && !(r == 2 || r == 3 || nchw || nhwc || (r == 5 && s[0] == 1 && s[1] == 1)))
    c.Fail("linear mode supports 2-D and 3-D inputs, and 4-D/5-D inputs with outer scales 1");
  if (a.mode == Mode::kCubic && !(r == 2 || nchw || (nhwc && (a.antialias || (s[1] >= 1 && s[2] >= 1)))))
    c.Fail("cubic mode supports 2-D inputs and 4-D NCHW (or upscaled NHWC) ones");
}

/** Output dims from sizes (scales derived from them), as ORT's ParseSizesData and
 *  ParseScalesDataAndAdjustOutputSize do. */
void GeometryFromSizes(const OpContext& c, const Attrs& a, const std::vector<int64_t>& dims,
                       std::vector<float>& scales, std::vector<int64_t>& out) {
  const std::vector<int64_t> sizes = c.host_ints(3);
  const size_t rank = dims.size();
  if (a.axes.empty() ? sizes.size() != rank : sizes.size() != a.axes.size())
    c.Fail("sizes must hold one value per input dimension (or per axis)");
  out = dims;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t axis = a.axes.empty() ? static_cast<int64_t>(i) : a.axes[i];
    if (axis >= static_cast<int64_t>(rank)) c.Fail("axes must be less than the input rank");
    out[axis] = sizes[i];
  }
  scales.assign(rank, 1.0f);
  for (size_t i = 0; i < rank; ++i) {
    if (dims[i] == 0 && out[i] != 0) c.Fail("cannot resize an empty dimension to a non-empty one");
    if (dims[i] != 0) scales[i] = static_cast<float>(out[i]) / static_cast<float>(dims[i]);
  }
  ApplyPolicy(a, dims, scales, out);
}

/** Scales and output dims of the node, as ORT's Upsample<T>::Compute derives them. */
void OutputGeometry(const OpContext& c, const Attrs& a, const std::vector<int64_t>& dims,
                    std::vector<float>& scales, std::vector<int64_t>& out) {
  const int ver = c.node.since_version;
  const size_t scales_at = ver >= 11 ? 2 : 1;
  const bool has_scales = ver < 9 || (c.has_input(scales_at) && c.host(scales_at).NumElements() > 0);
  const bool has_sizes = ver >= 11 && c.has_input(3) && c.host(3).NumElements() > 0;
  if (has_scales && has_sizes) c.Fail("only one of scales or sizes may be given");
  if (has_scales) {
    std::vector<float> given;
    if (ver < 9) {
      const Attribute* attr = c.node.Attr("scales");
      if (!attr || attr->kind != Attribute::Kind::kFloats) c.Fail("attribute scales must be floats");
      given = attr->floats;
    } else {
      given = HostFloats(c, scales_at);
    }
    scales = ExpandToRank(c, given, a.axes, dims.size(), "scales");
    out.resize(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) out[i] = static_cast<int64_t>(scales[i] * dims[i]);
  } else {
    if (!has_sizes) c.Fail("either scales or sizes must be given");
    GeometryFromSizes(c, a, dims, scales, out);
  }
  for (int64_t d : out)
    if (d < 0 || d > std::numeric_limits<int32_t>::max()) c.Fail("output dimension out of range");
  ValidateScales(c, a, scales);
}

/** The roi, [starts..., ends...] over every dim: given (tf_crop_and_resize only) or [0..., 1...]. */
std::vector<float> Roi(const OpContext& c, const Attrs& a, size_t rank) {
  std::vector<float> roi(2 * rank, 0.f);
  std::fill(roi.begin() + rank, roi.end(), 1.f);
  if (a.coord != Coord::kTfCropAndResize || c.node.since_version < 11 || !c.has_input(1)) return roi;
  const std::vector<float> given = HostFloats(c, 1);
  if (a.axes.empty()) {
    if (given.size() != 2 * rank) c.Fail("roi must hold 2 values per input dimension");
    return given;
  }
  if (given.size() != 2 * a.axes.size()) c.Fail("roi must hold 2 values per axis");
  for (size_t i = 0; i < a.axes.size(); ++i) {
    roi[a.axes[i]] = given[i];
    roi[rank + a.axes[i]] = given[a.axes.size() + i];
  }
  return roi;
}

// ---------------------------------------------------------------------------------------------
// Resampling

/** A length-`n` vector laid along `axis` of a rank-`rank` array (1 elsewhere), for broadcasting. */
mx::Shape AlongAxis(int axis, int rank, int64_t n) {
  mx::Shape shape(rank, 1);
  shape[axis] = static_cast<int32_t>(n);
  return shape;
}

/** Tap `t` of `s` along `axis`: x[index[t]] * weight[t], zero where the tap is past the window. */
mx::array WeightedTap(const OpContext& c, const mx::array& x, int axis, const AxisSampling& s, int t) {
  const int32_t out = static_cast<int32_t>(s.outside.size());
  const mx::array idx(s.index.begin() + t * out, mx::Shape{out}, mx::int32);
  mx::array tap = mx::take(x, idx, axis, c.stream);
  if (s.weight.empty()) return tap;
  const mx::Shape along = AlongAxis(axis, x.ndim(), out);
  tap = mx::multiply(tap, mx::array(s.weight.begin() + t * out, along, mx::float32), c.stream);
  if (!s.divisor.empty()) tap = mx::divide(tap, mx::array(s.divisor.begin(), along, mx::float32), c.stream);
  const auto valid = s.valid.begin() + t * out;
  if (std::all_of(valid, valid + out, [](uint8_t v) { return v != 0; })) return tap;
  return mx::where(mx::array(valid, along, mx::bool_), tap, mx::array(0.0f), c.stream);
}

/** r when `s` repeats each of the axis's `in` values r times in order (index[o] = o / r over
 *  in * r outputs, one tap, no weights, nothing outside): integer nearest upsampling; else 0. */
int RepeatCount(const AxisSampling& s, int64_t in) {
  const int64_t out = static_cast<int64_t>(s.outside.size());
  if (s.taps != 1 || !s.weight.empty() || !s.divisor.empty() || in < 1 || out % in != 0) return 0;
  const int64_t r = out / in;
  for (int64_t o = 0; o < out; ++o)
    if (s.index[o] != o / r || !s.valid[o] || s.outside[o]) return 0;
  return static_cast<int>(r);
}

/** Resamples `x` (float32 unless nearest) along `axis` as `s` says. */
mx::array ResampleAxis(const OpContext& c, const mx::array& x, int axis, const AxisSampling& s) {
  // Integer nearest upsampling (the FPN heads of detectors): a broadcast copy, not a gather
  // (PP-OCRv4's detector: MLX's gather and its index walk were 6% of its CPU profile).
  if (const int r = RepeatCount(s, x.shape(axis)); r > 0) return mx::repeat(x, r, axis, c.stream);
  if (s.taps <= kMaxChainTaps) {
    mx::array y = WeightedTap(c, x, axis, s, 0);
    for (int t = 1; t < s.taps; ++t) y = mx::add(y, WeightedTap(c, x, axis, s, t), c.stream);
    return y;
  }
  // Wide windows: gather every tap at once as [.., taps, out, ..] and sum the weighted taps.
  const int32_t out = static_cast<int32_t>(s.outside.size());
  mx::Shape split = x.shape();
  split[axis] = s.taps;
  split.insert(split.begin() + axis + 1, out);
  const mx::array idx(s.index.begin(), mx::Shape{s.taps * out}, mx::int32);
  const mx::array taps = mx::reshape(mx::take(x, idx, axis, c.stream), split, c.stream);
  mx::Shape along(split.size(), 1);
  along[axis] = s.taps;
  along[axis + 1] = out;
  const mx::array weighted =
      mx::where(mx::array(s.valid.begin(), along, mx::bool_),
                mx::multiply(taps, mx::array(s.weight.begin(), along, mx::float32), c.stream),
                mx::array(0.0f), c.stream);
  return mx::sum(weighted, axis, false, c.stream);
}

/** The axes ORT's kernel resamples, innermost first, and whether it takes its filtered
 *  (antialias) path: that path handles its fixed spatial axes; the others the axes whose scale is
 *  not 1. */
std::vector<int> ResampledAxes(const Attrs& a, const std::vector<float>& scales, bool& filtered) {
  const int rank = static_cast<int>(scales.size());
  const bool nchw = rank == 4 && scales[0] == 1 && scales[1] == 1;
  filtered = a.mode != Mode::kNearest && (a.antialias || (a.mode == Mode::kCubic && rank == 4 && !nchw));
  std::vector<int> axes;
  for (int d = rank - 1; d >= 0; --d) {
    const bool spatial = rank <= 3 || (rank == 4 ? (nchw ? d >= 2 : d == 1 || d == 2) : d >= 2);
    if (filtered ? spatial : scales[d] != 1.0f) axes.push_back(d);
  }
  return axes;
}

std::vector<mx::array> TranslateResize(const OpContext& c) {
  Attrs a;
  if (std::string why = ParseAttrs(c.node, a); !why.empty()) c.Fail(why);
  const mx::array& x = c.input(0);
  const std::vector<int64_t> dims = Dims(x);
  const int rank = x.ndim();
  if (rank == 0) c.Fail("input must have rank >= 1");
  std::vector<float> scales;
  std::vector<int64_t> out;
  OutputGeometry(c, a, dims, scales, out);
  const std::vector<float> roi = Roi(c, a, rank);
  if (out == dims) return {x};
  const mx::Shape out_shape = shape_util::ToShape(c, out);
  if (std::find(out.begin(), out.end(), 0) != out.end()) return {mx::zeros(out_shape, x.dtype(), c.stream)};

  bool filtered = false;
  const std::vector<int> axes = ResampledAxes(a, scales, filtered);
  const bool rounds_per_axis = filtered && x.dtype() != mx::float32;
  mx::array y = a.mode == Mode::kNearest ? x : mx::astype(x, mx::float32, c.stream);
  std::optional<mx::array> outside;
  for (int axis : axes) {
    const AxisSampling s =
        filtered ? SampleAxisFiltered(a, dims[axis], out[axis], scales[axis], roi[axis], roi[rank + axis])
                 : SampleAxis(a, dims[axis], out[axis], scales[axis], roi[axis], roi[rank + axis],
                              a.mode == Mode::kCubic && axis == rank - 2);
    if (!filtered || out[axis] != dims[axis]) y = ResampleAxis(c, y, axis, s);
    if (rounds_per_axis) y = mx::astype(mx::astype(y, x.dtype(), c.stream), mx::float32, c.stream);
    if (std::any_of(s.outside.begin(), s.outside.end(), [](uint8_t b) { return b != 0; })) {
      const mx::array mask(s.outside.begin(), AlongAxis(axis, rank, out[axis]), mx::bool_);
      outside = outside ? mx::logical_or(*outside, mask, c.stream) : mask;
    }
  }
  y = mx::astype(y, x.dtype(), c.stream);
  if (outside)
    y = mx::where(*outside, mx::astype(mx::array(a.extrapolation), x.dtype(), c.stream), y, c.stream);
  return {y};
}

}  // namespace

void RegisterResizeOps(OpRegistry& r) {
  // Upsample: 7-8 take scales as an attribute, 9 as an input (deprecated from 10).
  r.Add({"", "Upsample", 7, 8, ClaimResizeLike, TranslateResize});
  r.Add({"", "Upsample", 9, 9, ClaimResizeLike, TranslateResize});
  // Resize: 11 adds roi/sizes and the coordinate/nearest/cubic attributes, 13 makes roi/scales
  // optional, 18 adds axes/antialias/keep_aspect_ratio_policy, 19 half_pixel_symmetric.
  r.Add({"", "Resize", 10, 10, ClaimResizeLike, TranslateResize});
  r.Add({"", "Resize", 11, 12, ClaimResizeLike, TranslateResize});
  r.Add({"", "Resize", 13, 17, ClaimResizeLike, TranslateResize});
  r.Add({"", "Resize", 18, 18, ClaimResizeLike, TranslateResize});
  r.Add({"", "Resize", 19, 25, ClaimResizeLike, TranslateResize});
  RegisterGridSampleOps(r);
}

}  // namespace mlx_ep
