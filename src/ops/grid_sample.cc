// Op family: resize (sampling). GridSample (opsets 16, 20, 22) and AffineGrid (20, below), registered
// from RegisterResizeOps (resize.cc). GridSample: X [N, C, H, W] (or [N, C, D, H, W]) sampled at grid [N, H',
// W', 2] ([N, D', H', W', 3]) of normalized (x, y[, z]) locations, in ORT's CPU kernel's arithmetic
// (onnxruntime/core/providers/cpu/tensor/grid_sample.cc), float32 as ORT registers it: the location
// denormalized in float32, nearest as nearbyint (half to even), linear's floor and weights,
// cubic's Keys coefficients (a = -0.75) over a 4 x 4 neighbourhood (2-D only, as ORT), and the
// padding applied to each tap's integer index (zeros: 0 outside; border: clamped; reflection: the
// index reflected by ORT's GsReflect between the borders, then truncated). Every tap is a
// take_along_axis of the flattened spatial dims.
#include <array>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

enum class Mode { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

struct GridSampleAttrs {
  Mode mode = Mode::kLinear;
  Padding padding = Padding::kZeros;
  bool align_corners = false;
};

/** The attributes, or why not: opset 16 names the modes bilinear and bicubic, 20 linear and cubic. */
std::string ParseGridSample(const Node& n, GridSampleAttrs& a) {
  const bool old_names = n.since_version < 20;
  const std::string mode = n.AttrString("mode", old_names ? "bilinear" : "linear");
  if (mode == "nearest")
    a.mode = Mode::kNearest;
  else if (mode == (old_names ? "bilinear" : "linear"))
    a.mode = Mode::kLinear;
  else if (mode == (old_names ? "bicubic" : "cubic"))
    a.mode = Mode::kCubic;
  else
    return "unknown mode '" + mode + "'";
  const std::string padding = n.AttrString("padding_mode", "zeros");
  if (padding == "zeros")
    a.padding = Padding::kZeros;
  else if (padding == "border")
    a.padding = Padding::kBorder;
  else if (padding == "reflection")
    a.padding = Padding::kReflection;
  else
    return "unknown padding_mode '" + padding + "'";
  a.align_corners = n.AttrInt("align_corners", 0) != 0;
  return "";
}

Claim ClaimGridSample(const NodeView& v) {
  if (std::optional<Claim> no = DeclineUnknownAttributes(v.node(), {"align_corners", "mode", "padding_mode"}))
    return *no;
  GridSampleAttrs a;
  if (std::string why = ParseGridSample(v.node(), a); !why.empty()) return Claim::No(why);
  if (!v.has_input(0) || !v.has_input(1)) return Claim::No("inputs X/grid are missing");
  // ORT's CPU kernel takes float and double; MLX's GPU has no double
  if (v.input_type(0) != ElemType::kFloat || v.input_type(1) != ElemType::kFloat)
    return Claim::No(TypeReason(v, v.input_type(0) != ElemType::kFloat ? 0 : 1, "float32 only"));
  const std::optional<int64_t> rank = v.input_rank(0);
  if (!rank || (*rank != 4 && *rank != 5)) return Claim::No("X must be 4-D or 5-D with a known rank");
  if (*rank == 5 && a.mode == Mode::kCubic) return Claim::No("cubic is 2-D only (as ORT's kernel)");
  return Claim::Yes();
}

/** One spatial axis of the grid: its denormalized locations, the axis' length and borders. */
struct Axis {
  mx::array location;  // [N, out...] float32, in pixels
  int length;
  float lo, hi;  // GsReflect's borders
};

/** GsDenormalize: [-1, 1] to [0, length - 1] (align_corners) or [-0.5, length - 0.5]. */
mx::array Denormalize(const mx::array& n, int length, bool align_corners, mx::Stream s) {
  const mx::array one(1.f), two(2.f);
  if (align_corners)
    return mx::multiply(mx::divide(mx::add(n, one, s), two, s), mx::array(static_cast<float>(length - 1)), s);
  return mx::divide(
      mx::subtract(mx::multiply(mx::add(n, one, s), mx::array(static_cast<float>(length)), s), one, s), two,
      s);
}

/** GsReflect of integral float indices, truncated as ORT casts the result to int64 (float). */
mx::array Reflect(const mx::array& f, float lo, float hi, mx::Stream s) {
  const float range = hi - lo;
  if (range == 0) return mx::full(f.shape(), lo, mx::float32, s);  // ORT divides by zero there
  const mx::array lo_a(lo), hi_a(hi), range_a(range);
  auto fold = [&](const mx::array& d, const mx::array& near, const mx::array& far, bool below) {
    // n = int(d / range), r = d - n * range; even n: near + r (below) / near - r; odd: the other
    const mx::array n = mx::astype(mx::divide(d, range_a, s), mx::int32, s);
    const mx::array r = mx::subtract(d, mx::multiply(mx::astype(n, mx::float32, s), range_a, s), s);
    const mx::array even = mx::equal(mx::remainder(n, mx::array(2), s), mx::array(0), s);
    const mx::array from_near = below ? mx::add(near, r, s) : mx::subtract(near, r, s);
    const mx::array from_far = below ? mx::subtract(far, r, s) : mx::add(far, r, s);
    return mx::where(even, from_near, from_far, s);
  };
  const mx::array below = mx::less(f, lo_a, s), above = mx::greater(f, hi_a, s);
  // d is clamped at 0 where the branch is not taken, so that n stays in range there
  const mx::array under = fold(mx::maximum(mx::subtract(lo_a, f, s), mx::array(0.f), s), lo_a, hi_a, true);
  const mx::array over = fold(mx::maximum(mx::subtract(f, hi_a, s), mx::array(0.f), s), hi_a, lo_a, false);
  const mx::array reflected = mx::where(below, under, mx::where(above, over, f, s), s);
  return mx::astype(mx::astype(reflected, mx::int32, s), mx::float32, s);
}

/** The flat index into X's spatial dims of the tap at integral float indices `at` (one per axis,
 *  outermost first) after the padding, and (zeros) whether it lies inside. */
std::pair<mx::array, std::optional<mx::array>> Tap(const std::vector<mx::array>& at,
                                                   const std::vector<Axis>& axes, Padding padding,
                                                   mx::Stream s) {
  std::optional<mx::array> inside;
  std::optional<mx::array> flat;
  for (size_t d = 0; d < axes.size(); ++d) {
    const float last = static_cast<float>(axes[d].length - 1);
    mx::array i = at[d];
    if (padding == Padding::kReflection) i = Reflect(i, axes[d].lo, axes[d].hi, s);
    if (padding == Padding::kZeros) {
      const mx::array in =
          mx::logical_and(mx::greater_equal(i, mx::array(0.f), s), mx::less_equal(i, mx::array(last), s), s);
      inside = inside ? mx::logical_and(*inside, in, s) : in;
    }
    // zeros: any in-range index where the tap reads 0; border: the clamped one. Never out of
    // bounds, whatever the location (a NaN index would cast to anything).
    i = mx::where(mx::isnan(i, s), mx::array(0.f), i, s);
    i = mx::astype(mx::clip(i, mx::array(0.f), mx::array(last), s), mx::int32, s);
    flat = flat ? mx::add(mx::multiply(*flat, mx::array(axes[d].length), s), i, s) : i;
  }
  return {*flat, inside};
}

/** X's values at one tap for every output location: [N, C, out...]. */
mx::array Gather(const mx::array& x_flat, const std::vector<mx::array>& at, const std::vector<Axis>& axes,
                 Padding padding, const mx::Shape& out_shape, mx::Stream s) {
  auto [flat, inside] = Tap(at, axes, padding, s);
  const int n = x_flat.shape(0), c = x_flat.shape(1);
  const mx::array index =
      mx::broadcast_to(mx::reshape(flat, {n, 1, -1}, s), {n, c, static_cast<int>(flat.size() / n)}, s);
  mx::array v = mx::take_along_axis(x_flat, index, 2, s);
  if (inside) v = mx::where(mx::reshape(*inside, {n, 1, -1}, s), v, mx::array(0.f), s);
  return mx::reshape(v, out_shape, s);
}

/** Keys' cubic coefficients (a = -0.75) for t = |x| in [0, 1], as ORT's GsGetCubicCoeffs. */
std::array<mx::array, 4> CubicCoefficients(const mx::array& x, mx::Stream s) {
  const float a = -0.75f;
  const mx::array t = mx::abs(x, s), one(1.f), two(2.f);
  auto f = [](float v) { return mx::array(v); };
  auto mul = [&](const mx::array& p, const mx::array& q) { return mx::multiply(p, q, s); };
  auto add = [&](const mx::array& p, const mx::array& q) { return mx::add(p, q, s); };
  auto sub = [&](const mx::array& p, const mx::array& q) { return mx::subtract(p, q, s); };
  // ((a (u) - 5a) u + 8a) u - 4a for u = t + 1 and u = 2 - t
  auto outer = [&](const mx::array& u) {
    return sub(mul(add(mul(sub(mul(f(a), u), f(5 * a)), u), f(8 * a)), u), f(4 * a));
  };
  // ((a + 2) u - (a + 3)) u u + 1 for u = t and u = 1 - t
  auto inner = [&](const mx::array& u) { return add(mul(mul(sub(mul(f(a + 2), u), f(a + 3)), u), u), one); };
  return {outer(add(t, one)), inner(t), inner(sub(one, t)), outer(sub(two, t))};
}

/** sum_k w[k] * p[k], added left to right as ORT writes it. */
mx::array Weighted(const std::array<mx::array, 4>& w, const std::array<mx::array, 4>& p, mx::Stream s) {
  mx::array sum = mx::multiply(w[0], p[0], s);
  for (int k = 1; k < 4; ++k) sum = mx::add(sum, mx::multiply(w[k], p[k], s), s);
  return sum;
}

/** What every tap of one GridSample reads: X as [N, C, spatial], the axes, the padding. */
struct Sampler {
  mx::array x_flat;
  std::vector<Axis> axes;
  Padding padding;
  mx::Shape out_shape;  // [N, C, out...]
  mx::Stream s;

  mx::array At(const std::vector<mx::array>& taps) const {
    return Gather(x_flat, taps, axes, padding, out_shape, s);
  }
  mx::array Plus(const mx::array& f, float k) const { return mx::add(f, mx::array(k), s); }
};

mx::array SampleNearest(const Sampler& g) {
  std::vector<mx::array> taps;
  for (const Axis& axis : g.axes) taps.push_back(mx::round(axis.location, 0, g.s));
  return g.At(taps);
}

// Each axis' taps floor and floor + 1 with weights (floor + 1) - x and x - floor. ORT nests the
// sums innermost axis first: dy2 (dx2 p11 + dx1 p12) + dy1 (...), z outermost; its zeros,
// no-align_corners 2-D path sums w11 p11 + w12 p12 + w21 p21 + w22 p22 with w = dy dx instead.
mx::array SampleLinear(const Sampler& g, bool plan_path) {
  const mx::Stream s = g.s;
  std::vector<mx::array> lower, upper;
  std::vector<std::array<mx::array, 2>> weights;
  for (const Axis& axis : g.axes) {
    lower.push_back(mx::floor(axis.location, s));
    upper.push_back(g.Plus(lower.back(), 1.f));
    weights.push_back(
        {mx::subtract(upper.back(), axis.location, s), mx::subtract(axis.location, lower.back(), s)});
  }
  if (plan_path) {
    std::optional<mx::array> sum;
    for (int k = 0; k < 4; ++k) {
      const int ky = k / 2, kx = k % 2;
      const mx::array w = mx::multiply(weights[0][ky], weights[1][kx], s);
      const mx::array term =
          mx::multiply(w, g.At({ky == 0 ? lower[0] : upper[0], kx == 0 ? lower[1] : upper[1]}), s);
      sum = sum ? mx::add(*sum, term, s) : term;
    }
    return *sum;
  }
  std::vector<mx::array> taps;
  std::function<mx::array(size_t)> blend = [&](size_t d) {
    if (d == g.axes.size()) return g.At(taps);
    taps.push_back(lower[d]);
    const mx::array near = blend(d + 1);
    taps.back() = upper[d];
    const mx::array far = blend(d + 1);
    taps.pop_back();
    return mx::add(mx::multiply(weights[d][0], near, s), mx::multiply(weights[d][1], far, s), s);
  };
  return blend(0);
}

// Cubic (2-D): taps floor - 1 ... floor + 2 on each axis with t = x - (floor - 1) - 1; each row
// (y) interpolated along x, then the rows along y.
mx::array SampleCubic(const Sampler& g) {
  const mx::Stream s = g.s;
  std::vector<mx::array> first;
  std::vector<std::array<mx::array, 4>> coefficients;
  for (const Axis& axis : g.axes) {
    first.push_back(g.Plus(mx::floor(axis.location, s), -1.f));
    coefficients.push_back(
        CubicCoefficients(mx::subtract(mx::subtract(axis.location, first.back(), s), mx::array(1.f), s), s));
  }
  std::vector<mx::array> rows;
  for (int h = 0; h < 4; ++h) {
    std::vector<mx::array> p;
    for (int w = 0; w < 4; ++w) p.push_back(g.At({g.Plus(first[0], h), g.Plus(first[1], w)}));
    rows.push_back(Weighted(coefficients[1], {p[0], p[1], p[2], p[3]}, s));
  }
  return Weighted(coefficients[0], {rows[0], rows[1], rows[2], rows[3]}, s);
}

std::vector<mx::array> TranslateGridSample(const OpContext& c) {
  GridSampleAttrs a;
  if (std::string why = ParseGridSample(c.node, a); !why.empty()) c.Fail(why);
  const mx::array& x = c.input(0);
  const mx::array& grid = c.input(1);
  const mx::Stream s = c.stream;
  const int dims = static_cast<int>(x.ndim()) - 2;
  if (dims != 2 && dims != 3) c.Fail("X must be 4-D or 5-D");
  if (static_cast<int>(grid.ndim()) != dims + 2 || grid.shape(-1) != dims || grid.shape(0) != x.shape(0))
    c.Fail("grid must be [N, out..., " + std::to_string(dims) + "] with X's N");
  const int n = x.shape(0), channels = x.shape(1);
  mx::Shape out_shape = {n, channels};
  for (int d = 1; d <= dims; ++d) out_shape.push_back(grid.shape(d));
  int spatial = 1;
  for (int d = 2; d < static_cast<int>(x.ndim()); ++d) {
    // as ORT: no pixel to sample (every tap would read past an empty axis)
    if (x.shape(d) == 0) c.Fail("input spatial dimensions must be non-empty for sampling");
    spatial *= x.shape(d);
  }
  Sampler g{mx::reshape(x, {n, channels, spatial}, s), {}, a.padding, out_shape, s};
  // The grid's last axis holds (x, y[, z]): x is the innermost spatial dim; axes outermost first.
  for (int d = 0; d < dims; ++d) {
    const int length = x.shape(2 + d);
    mx::array normalized = mx::take(grid, mx::array(dims - 1 - d), static_cast<int>(grid.ndim()) - 1, s);
    // ORT 1.31 reads a non-finite location as -1 (its outputs there match that in every mode)
    normalized = mx::where(mx::isfinite(normalized, s), normalized, mx::array(-1.f), s);
    const float lo = a.align_corners ? 0.f : -0.5f;
    const float hi = a.align_corners ? static_cast<float>(length) - 1.f : static_cast<float>(length) - 0.5f;
    g.axes.push_back(
        {mx::expand_dims(Denormalize(normalized, length, a.align_corners, s), 1, s), length, lo, hi});
  }
  if (a.mode == Mode::kNearest) return {SampleNearest(g)};
  if (a.mode == Mode::kCubic) return {SampleCubic(g)};
  return {SampleLinear(g, dims == 2 && a.padding == Padding::kZeros && !a.align_corners)};
}

// ---------------------------------------------------------------------------------------------
// AffineGrid (20): grid[n, ..., i] = theta[n] @ (x, y[, z], 1) over a base grid of each axis'
// normalized pixel centres, in ORT's arithmetic (affine_grid.cc): an axis of length L is Eigen's
// LinSpaced(L, -1, 1) in float32 (-1 + i * (2 / (L - 1)), the last exactly 1; L = 1: 1), times
// (L - 1) / L without align_corners; the product sums theta's row left to right, then adds the
// translation. The base grid is computed on the host (`size` is a host value).

Claim ClaimAffineGrid(const NodeView& v) {
  if (std::optional<Claim> no = DeclineUnknownAttributes(v.node(), {"align_corners"})) return *no;
  if (!v.has_input(0) || !v.has_input(1)) return Claim::No("inputs theta/size are missing");
  if (v.input_type(0) != ElemType::kFloat) return Claim::No(TypeReason(v, 0, "float32 only"));
  if (v.input_type(1) != ElemType::kInt64) return Claim::No(TypeReason(v, 1, "size"));
  return Claim::Yes({1});
}

/** One axis' base coordinates as ORT's generate_base_grid computes them. */
std::vector<float> BaseAxis(int64_t length, bool align_corners) {
  std::vector<float> v(static_cast<size_t>(length));
  const float step = length > 1 ? 2.f / static_cast<float>(length - 1) : 0.f;
  for (int64_t i = 0; i < length; ++i) {
    v[i] = length == 1 || i == length - 1 ? 1.f : -1.f + static_cast<float>(i) * step;
    if (!align_corners) v[i] = v[i] * static_cast<float>(length - 1) / static_cast<float>(length);
  }
  return v;
}

std::vector<mx::array> TranslateAffineGrid(const OpContext& c) {
  const std::vector<int64_t> size = c.host_ints(1);
  const mx::array& theta = c.input(0);
  const mx::Stream s = c.stream;
  const bool align_corners = c.node.AttrInt("align_corners", 0) != 0;
  if (size.size() != 4 && size.size() != 5) c.Fail("size must hold 4 or 5 values");
  const int dims = static_cast<int>(size.size()) - 2;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] < 0 || size[d] > std::numeric_limits<int32_t>::max())
      c.Fail("size holds a negative or too large value");
    if (d >= 2 && size[d] == 0) c.Fail("size's spatial dims must be positive (as ORT)");
  }
  const int n = static_cast<int>(size[0]);
  if (theta.ndim() != 3 || theta.shape(0) != n || theta.shape(1) != dims || theta.shape(2) != dims + 1)
    c.Fail("theta must be [N, " + std::to_string(dims) + ", " + std::to_string(dims + 1) + "] with size's N");
  // base coordinates per component (x: the innermost axis), shaped to broadcast over [N, out...]
  std::vector<mx::array> base;
  for (int k = 0; k < dims; ++k) {
    const int axis = dims - 1 - k;  // component k = x, y, z reads spatial axis dims - 1 - k
    const int64_t length = size[2 + axis];
    std::vector<float> values = BaseAxis(length, align_corners);
    mx::Shape shape(dims + 1, 1);
    shape[1 + axis] = static_cast<int>(length);
    base.push_back(mx::array(values.begin(), shape, mx::float32));
  }
  std::vector<mx::array> components;
  for (int row = 0; row < dims; ++row) {
    auto entry = [&](int col) {  // theta[:, row, col] as [N, 1, ...]
      mx::Shape shape(dims + 1, 1);
      shape[0] = n;
      return mx::reshape(mx::slice(theta, {0, row, col}, {n, row + 1, col + 1}, s), shape, s);
    };
    mx::array sum = mx::multiply(entry(0), base[0], s);
    for (int k = 1; k < dims; ++k) sum = mx::add(sum, mx::multiply(entry(k), base[k], s), s);
    components.push_back(mx::add(sum, entry(dims), s));
  }
  mx::Shape out(dims + 1);
  out[0] = n;
  for (int d = 0; d < dims; ++d) out[1 + d] = static_cast<int>(size[2 + d]);
  for (mx::array& component : components) component = mx::broadcast_to(component, out, s);
  return {mx::stack(components, -1, s)};
}

}  // namespace

void RegisterGridSampleOps(OpRegistry& r) {
  r.Add({"", "GridSample", 16, 19, ClaimGridSample, TranslateGridSample});
  r.Add({"", "GridSample", 20, 21, ClaimGridSample, TranslateGridSample});
  r.Add({"", "GridSample", 22, 25, ClaimGridSample, TranslateGridSample});
  r.Add({"", "AffineGrid", 20, 25, ClaimAffineGrid, TranslateAffineGrid});
}

}  // namespace mlx_ep
