// MaxPool of float32 values over 1 or 2 spatial dims on MLX's CPU device as one primitive of the
// EP's (pool_internal.h, MaxPoolOnCpu), part of the pooling family.
//
// The composed form (pool.cc, WindowMax) is a strided Slice per window element and the scan's
// comparisons and selects: a YOLO-style detector's three 5x5 MaxPools made ~200 of its 316 MLX
// primitives a run. Here: one primitive, ORT's rule as pool.cc states it (a window's value is its
// first element inside the input, replaced by each later one in row-major order that compares
// greater; a window with no element inside gives float32's lowest value).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/cpu_primitive.h"
#include "ops/pool_internal.h"
#include "ops/quantized_cpu.h"

namespace mlx_ep {
namespace pool {
namespace {

/** The window geometry of both dims (a 1-D pool has height 1), as pool.cc's Axis. */
struct MaxPool2d {
  Axis h, w;
  int spatial_dims = 2;
  bool operator==(const MaxPool2d& o) const {
    auto same = [](const Axis& a, const Axis& b) {
      return a.in == b.in && a.kernel == b.kernel && a.stride == b.stride && a.dilation == b.dilation &&
             a.pad_begin == b.pad_begin && a.out == b.out;
    };
    return same(h, o.h) && same(w, o.w) && spatial_dims == o.spatial_dims;
  }
};

/** Per output o of `ax`: the window elements [first, last) that lie inside the input (a window's
 *  inside elements are contiguous in j, as q = o * stride - pad + j * dilation grows with j). */
void InsideRanges(const Axis& ax, std::vector<int64_t>& first, std::vector<int64_t>& last) {
  first.assign(ax.out, 0);
  last.assign(ax.out, 0);
  for (int64_t o = 0; o < ax.out; ++o) {
    int64_t j0 = 0;
    while (j0 < ax.kernel && ax.Coord(o, j0) < 0) ++j0;
    int64_t j1 = j0;
    while (j1 < ax.kernel && ax.Coord(o, j1) < ax.in) ++j1;
    first[o] = j0;
    last[o] = j1;
  }
}

/** The rule's step, which WindowMax, InteriorMax and InteriorFixed take: `v` replaces `best` only where it
 *  compares greater, so that a NaN never replaces a value and a NaN best stays. */
MLX_EP_INLINE float Keep(float best, float v) { return v > best ? v : best; }

/** Output `ox` of row `oy` by the rule: its first inside element, replaced by each later one
 *  (row-major over the window) that compares greater; float32's lowest with none inside. */
float WindowMax(const float* x, const MaxPool2d& p, int64_t oy, int64_t ox, int64_t h0, int64_t h1,
                int64_t w0, int64_t w1) {
  if (h0 >= h1 || w0 >= w1) return std::numeric_limits<float>::lowest();
  float best = x[p.h.Coord(oy, h0) * p.w.in + p.w.Coord(ox, w0)];  // whatever it is (NaN too)
  for (int64_t jy = h0; jy < h1; ++jy) {
    const float* row = x + p.h.Coord(oy, jy) * p.w.in;
    for (int64_t jx = w0; jx < w1; ++jx) {
      best = Keep(best, row[p.w.Coord(ox, jx)]);  // the first element compares equal to itself: no change
    }
  }
  return best;
}

/** Outputs [ox0, ox1) of row `oy` whose windows lie inside the input along the width: the same
 *  rule, each window element in turn over all of them (the loop over outputs vectorizes where
 *  the stride is 1; other strides load an element at a time: see InteriorFixed). */
MLX_EP_CLONES void InteriorMax(const float* x, const MaxPool2d& p, int64_t oy, int64_t h0, int64_t h1,
                               int64_t ox0, int64_t ox1, float* out) {
  const int64_t stride = p.w.stride;
  const float* first = x + p.h.Coord(oy, h0) * p.w.in;
  for (int64_t ox = ox0; ox < ox1; ++ox) out[ox] = first[ox * stride - p.w.pad_begin];
  for (int64_t jy = h0; jy < h1; ++jy) {
    const float* row = x + p.h.Coord(oy, jy) * p.w.in;
    for (int64_t jx = 0; jx < p.w.kernel; ++jx) {
      const int64_t at = jx * p.w.dilation - p.w.pad_begin;  // inside the row for every ox here
      for (int64_t ox = ox0; ox < ox1; ++ox) {
        out[ox] = Keep(out[ox], row[ox * stride + at]);
      }
    }
  }
}

/** `best`, then w[1] ... w[sizeof...(J)] in turn: unrolled at compile time, as a loop of its own
 *  (even of one trip) keeps GCC from vectorizing the loop over outputs around it. */
template <std::size_t... J>
MLX_EP_INLINE float KeepRest(float best, const float* w, std::index_sequence<J...>) {
  ((best = Keep(best, w[J + 1])), ...);
  return best;
}

/** One window row of kKw elements (dilation 1) at `w`, in turn after `best`. */
template <int kKw>
MLX_EP_INLINE float KeepRow(float best, const float* w) {
  return KeepRest(Keep(best, w[0]), w, std::make_index_sequence<kKw - 1>{});
}

/** Window row `a`, then `b` with kTwo, of outputs [0, n) (window i at a + i * kStride) onto `out`,
 *  or with kFirst from each window's first element a[i * kStride] (which Keep leaves as it is).
 *  Whole window rows a pass, two rows where there are: with compile-time width and stride a
 *  window's elements are vector loads and shuffles, and `out` is read and written once a pass. */
template <int kKw, int kStride, bool kFirst, bool kTwo>
MLX_EP_INLINE void RowsPass(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float best = KeepRow<kKw>(kFirst ? a[i * kStride] : out[i], a + i * kStride);
    if constexpr (kTwo) best = KeepRow<kKw>(best, b + i * kStride);
    out[i] = best;
  }
}

/** InteriorMax (the same values: each window's elements in row-major order) for a window width
 *  kKw and stride kStride known at compile time, dilation 1 along the width. InteriorMax loads a
 *  strided element at a time and passes over a row's outputs once per window element: 2x2 / 2 of
 *  [4,64,16,80] took 0.15 ms there, 0.07 ms here (one thread, this machine). */
template <int kKw, int kStride>
MLX_EP_CLONES void InteriorFixed(const float* x, const MaxPool2d& p, int64_t oy, int64_t h0, int64_t h1,
                                 int64_t ox0, int64_t ox1, float* out) {
  const int64_t n = ox1 - ox0;
  auto row = [&](int64_t jy) { return x + p.h.Coord(oy, jy) * p.w.in + ox0 * kStride - p.w.pad_begin; };
  out += ox0;
  if (h1 - h0 >= 2) {
    RowsPass<kKw, kStride, true, true>(row(h0), row(h0 + 1), n, out);
    h0 += 2;
  } else {
    RowsPass<kKw, kStride, true, false>(row(h0), nullptr, n, out);
    h0 += 1;
  }
  for (; h0 + 1 < h1; h0 += 2) RowsPass<kKw, kStride, false, true>(row(h0), row(h0 + 1), n, out);
  if (h0 < h1) RowsPass<kKw, kStride, false, false>(row(h0), nullptr, n, out);
}

using InteriorFn = void (*)(const float* x, const MaxPool2d& p, int64_t oy, int64_t h0, int64_t h1,
                            int64_t ox0, int64_t ox1, float* out);

/** InteriorFixed for the common window widths and strides (2x2 / 2, 3x3 / 2, YOLO's 5x5 / 1, a
 *  CRNN's 2x1 / (2, 1)), InteriorMax for the rest: each InteriorFixed is three clones. */
InteriorFn PickInterior(const Axis& w) {
  if (w.dilation != 1 && w.kernel != 1) return InteriorMax;
  const int64_t k = w.kernel, s = w.stride;
  if (k == 1 && s == 1) return InteriorFixed<1, 1>;
  if (k == 2 && s == 1) return InteriorFixed<2, 1>;
  if (k == 2 && s == 2) return InteriorFixed<2, 2>;
  if (k == 3 && s == 1) return InteriorFixed<3, 1>;
  if (k == 3 && s == 2) return InteriorFixed<3, 2>;
  if (k == 5 && s == 1) return InteriorFixed<5, 1>;
  return InteriorMax;
}

/** What every plane of a run shares: each output's window elements inside the input along each
 *  dim (InsideRanges), the outputs [ox0, ox1) whose windows lie inside the width and the kernel
 *  for those. Found once a run: found per plane, it made a 2x1 / (2, 1) pool of [4,256,4,40]
 *  0.055 ms instead of 0.029 ms (one thread). */
struct Windows {
  std::vector<int64_t> h0, h1, w0, w1;
  int64_t ox0 = 0, ox1 = 0;
  InteriorFn interior = InteriorMax;
};

Windows FindWindows(const MaxPool2d& p) {
  Windows win;
  InsideRanges(p.h, win.h0, win.h1);
  InsideRanges(p.w, win.w0, win.w1);
  auto inside = [&](int64_t ox) { return win.w0[ox] == 0 && win.w1[ox] == p.w.kernel; };
  while (win.ox0 < p.w.out && !inside(win.ox0)) ++win.ox0;
  win.ox1 = win.ox0;
  while (win.ox1 < p.w.out && inside(win.ox1)) ++win.ox1;
  win.interior = PickInterior(p.w);
  return win;
}

/** One output plane from one input plane: the interior kernel where a window lies inside the
 *  width, WindowMax at the edges (and for windows that leave the height, which the interior
 *  kernels handle by the row range h0, h1). */
void Plane(const float* x, const MaxPool2d& p, const Windows& win, float* y) {
  for (int64_t oy = 0; oy < p.h.out; ++oy) {
    float* out = y + oy * p.w.out;
    const int64_t h0 = win.h0[oy], h1 = win.h1[oy];
    const bool interior = win.ox1 > win.ox0 && h0 < h1;
    for (int64_t ox = 0; ox < (interior ? win.ox0 : p.w.out); ++ox)
      out[ox] = WindowMax(x, p, oy, ox, h0, h1, win.w0[ox], win.w1[ox]);
    if (!interior) continue;
    win.interior(x, p, oy, h0, h1, win.ox0, win.ox1, out);
    for (int64_t ox = win.ox1; ox < p.w.out; ++ox)
      out[ox] = WindowMax(x, p, oy, ox, h0, h1, win.w0[ox], win.w1[ox]);
  }
}

// Below this many window elements one thread is faster than waking others (as in quantized_cpu.cc).
constexpr int64_t kMinParallelWork = 1 << 16;

class MaxPoolCpu : public mx::UnaryPrimitive {
 public:
  MaxPoolCpu(mx::Stream stream, MaxPool2d p) : mx::UnaryPrimitive(stream), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(name(), stream(), inputs, out,
                      [p = p_](const std::vector<mx::array>& in, mx::array& y) {
                        const Windows win = FindWindows(p);
                        const int64_t planes = static_cast<int64_t>(in[0].shape(0)) * in[0].shape(1);
                        const int64_t in_plane = p.h.in * p.w.in, out_plane = p.h.out * p.w.out;
                        const float* x = in[0].data<float>();
                        float* dst = y.data<float>();
                        nbits_cpu::RunRanges(planes, planes * out_plane * p.h.kernel * p.w.kernel,
                                             kMinParallelWork, [&](int64_t begin, int64_t end) {
                                               for (int64_t q = begin; q < end; ++q)
                                                 Plane(x + q * in_plane, p, win, dst + q * out_plane);
                                             });
                      });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("MaxPoolCpu runs on the CPU only");
  }

  const char* name() const override { return "MaxPoolCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const MaxPoolCpu&>(other).p_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    mx::Shape shape = {inputs[0].shape(0), inputs[0].shape(1)};
    if (p_.spatial_dims == 2) shape.push_back(static_cast<int>(p_.h.out));
    shape.push_back(static_cast<int>(p_.w.out));
    return {shape};
  }

 private:
  MaxPool2d p_;
};

}  // namespace

std::optional<mx::array> MaxPoolOnCpu(const mx::array& x, const std::vector<Axis>& axes, mx::Stream s) {
  static const bool off = EnvOff(env::kPoolCpuKernel);
  if (off || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32 ||
      (axes.size() != 1 && axes.size() != 2) || x.ndim() != axes.size() + 2)
    return std::nullopt;
  MaxPool2d p;
  p.w = axes.back();
  p.h = axes.size() == 2 ? axes[0] : Axis{1, 1, 1, 1, 0, 0, 1};  // a 1-D pool: one row, one window row
  p.spatial_dims = static_cast<int>(axes.size());
  mx::Shape shape = {x.shape(0), x.shape(1)};
  for (const Axis& ax : axes) shape.push_back(static_cast<int>(ax.out));
  return mx::array(std::move(shape), mx::float32, std::make_shared<MaxPoolCpu>(s, p), {x});
}

}  // namespace pool
}  // namespace mlx_ep
