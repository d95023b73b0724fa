// MaxPool of float32 values over 1 or 2 spatial dims on MLX's CPU device as one primitive of the
// EP's (pool_internal.h, MaxPoolOnCpu), part of the pooling family.
//
// The composed form (pool.cc, WindowMax) is a strided Slice per window element and the scan's
// comparisons and selects: a YOLO-style detector's three 5x5 MaxPools made ~200 of its 316 MLX
// primitives a run. Here: one primitive, ORT's rule as pool.cc states it (a window's value is its
// first element inside the input, replaced by each later one in row-major order that compares
// greater; a window with no element inside gives float32's lowest value).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
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

/** One output plane from one input plane. */
void Plane(const float* x, const MaxPool2d& p, const std::vector<int64_t>& h0, const std::vector<int64_t>& h1,
           const std::vector<int64_t>& w0, const std::vector<int64_t>& w1, float* y) {
  for (int64_t oy = 0; oy < p.h.out; ++oy) {
    for (int64_t ox = 0; ox < p.w.out; ++ox) {
      float best = std::numeric_limits<float>::lowest();
      if (h0[oy] < h1[oy] && w0[ox] < w1[ox]) {
        const float* row = x + p.h.Coord(oy, h0[oy]) * p.w.in;
        best = row[p.w.Coord(ox, w0[ox])];  // the first inside element, whatever it is (NaN too)
        for (int64_t jy = h0[oy]; jy < h1[oy]; ++jy) {
          row = x + p.h.Coord(oy, jy) * p.w.in;
          for (int64_t jx = w0[ox]; jx < w1[ox]; ++jx) {
            const float v = row[p.w.Coord(ox, jx)];
            best = v > best ? v : best;  // the first element compares equal to itself: no change
          }
        }
      }
      y[oy * p.w.out + ox] = best;
    }
  }
}

// Below this many window elements one thread is faster than waking others (as in quantized_cpu.cc).
constexpr int64_t kMinParallelWork = 1 << 16;

class MaxPoolCpu : public mx::UnaryPrimitive {
 public:
  MaxPoolCpu(mx::Stream stream, MaxPool2d p) : mx::UnaryPrimitive(stream), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(
        name(), stream(), inputs, out, [p = p_](const std::vector<mx::array>& in, mx::array& y) {
          std::vector<int64_t> h0, h1, w0, w1;
          InsideRanges(p.h, h0, h1);
          InsideRanges(p.w, w0, w1);
          const int64_t planes = static_cast<int64_t>(in[0].shape(0)) * in[0].shape(1);
          const int64_t in_plane = p.h.in * p.w.in, out_plane = p.h.out * p.w.out;
          const float* x = in[0].data<float>();
          float* dst = y.data<float>();
          nbits_cpu::RunRanges(planes, planes * out_plane * p.h.kernel * p.w.kernel, kMinParallelWork,
                               [&](int64_t begin, int64_t end) {
                                 for (int64_t q = begin; q < end; ++q)
                                   Plane(x + q * in_plane, p, h0, h1, w0, w1, dst + q * out_plane);
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
