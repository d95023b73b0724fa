// Depthwise convolutions (one input channel per group) on MLX's CPU device as one primitive of
// the EP's (conv_internal.h, DepthwiseConvOnCpu), part of the convolution family.
//
// The composed form (ConvCpu's DepthwiseSum) is a Slice, an ExpandDims and the weight's Slice and
// Reshape per kernel position plus the Pad and the fused sum: ~37 MLX primitives for a 3x3
// kernel, ~100 for a 5x5, each evaluated every run. MobileNetV3's depthwise layers made 780 of
// its 987 primitives a run, and on small inputs a primitive's evaluation costs more than its
// arithmetic. Here: one primitive over a zero-padded copy of each input plane.
//
// Each output sums its kernel positions in the composed form's order (row-major over the kernel),
// in float32 from zero; the padding's zeros are multiplied too, as in the composed form and ORT's
// kernels (0 * inf is NaN there). A bias is added to each finished sum, as the Add after it did.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/conv_cpu_primitive.h"
#include "ops/conv_internal.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"

namespace mlx_ep {
namespace conv_util {
namespace {

/** The geometry of a 1-D or 2-D depthwise convolution as 2-D. */
struct Depthwise2d : Geometry2d {
  int channels_per_group = 1;  ///< M / groups: output channels reading one input channel
  bool bias = false;           ///< a third input: M values added to the sums
  bool operator==(const Depthwise2d&) const = default;
};

/** The input plane copied into `buf` with the padding as zeros (negative pads crop): row r,
 *  column c of `buf` is input (r - pad_h, c - pad_w), `buf` holding every position a window
 *  reaches; returns its row length. */
int64_t PadPlane(const float* x, const Depthwise2d& d, std::vector<float>& buf) {
  const int64_t rows = (d.out_h - 1) * d.stride_h + static_cast<int64_t>(d.kernel_h - 1) * d.dilation_h + 1;
  const int64_t cols = (d.out_w - 1) * d.stride_w + static_cast<int64_t>(d.kernel_w - 1) * d.dilation_w + 1;
  buf.assign(rows * cols, 0.f);
  const int64_t c0 = std::max<int64_t>(0, d.pad_w), c1 = std::min<int64_t>(cols, d.in_w + d.pad_w);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t iy = r - d.pad_h;
    if (iy < 0 || iy >= d.in_h || c1 <= c0) continue;
    std::copy(x + iy * d.in_w + (c0 - d.pad_w), x + iy * d.in_w + (c1 - d.pad_w), buf.data() + r * cols + c0);
  }
  return cols;
}

/** One output plane of a K x K kernel with column stride S and no column dilation from the
 *  padded plane (PadPlane): each output sums its K*K positions in row-major order in a register
 *  (the kernel loop unrolled, the output row vectorized), the padding's zeros multiplied as ORT
 *  does (0 * inf is NaN there too). */
template <int K, int S>
MLX_EP_CLONES void PlanePadded(const float* buf, int64_t cols, const float* w, const Depthwise2d& d,
                               float* y) {
  float wk[K * K];
  std::copy(w, w + K * K, wk);
  for (int64_t oy = 0; oy < d.out_h; ++oy) {
    const float* rows[K];
    for (int ky = 0; ky < K; ++ky)
      rows[ky] = buf + (oy * d.stride_h + static_cast<int64_t>(ky) * d.dilation_h) * cols;
    float* out = y + oy * d.out_w;
    for (int64_t ox = 0; ox < d.out_w; ++ox) {
      float acc = wk[0] * rows[0][ox * S];
#pragma GCC unroll 25  // before vectorization: the output loop then vectorizes
      for (int k = 1; k < K * K; ++k) acc += wk[k] * rows[k / K][ox * S + k % K];
      out[ox] = acc;
    }
  }
}

using PaddedPlaneFn = void (*)(const float*, int64_t, const float*, const Depthwise2d&, float*);

/** PlanePadded for `d`'s kernel and column stride, or nullptr. */
PaddedPlaneFn PaddedPlaneFor(const Depthwise2d& d) {
  if (d.kernel_h != d.kernel_w || d.dilation_w != 1 || (d.stride_w != 1 && d.stride_w != 2)) return nullptr;
  if (d.kernel_h == 3) return d.stride_w == 1 ? PlanePadded<3, 1> : PlanePadded<3, 2>;
  if (d.kernel_h == 5) return d.stride_w == 1 ? PlanePadded<5, 1> : PlanePadded<5, 2>;
  return nullptr;
}

/** Any other kernel from the padded plane: each kernel position in turn over every output (so
 *  each output sums its positions in row-major order from zero), the padding's zeros multiplied
 *  as in PlanePadded. */
MLX_EP_CLONES void PlanePaddedAny(const float* buf, int64_t cols, const float* w, const Depthwise2d& d,
                                  float* y) {
  std::fill(y, y + d.out_h * d.out_w, 0.f);
  for (int ky = 0; ky < d.kernel_h; ++ky)
    for (int kx = 0; kx < d.kernel_w; ++kx) {
      const float wv = w[ky * d.kernel_w + kx];
      for (int64_t oy = 0; oy < d.out_h; ++oy) {
        const float* row = buf + (oy * d.stride_h + static_cast<int64_t>(ky) * d.dilation_h) * cols +
                           static_cast<int64_t>(kx) * d.dilation_w;
        float* out = y + oy * d.out_w;
        for (int64_t ox = 0; ox < d.out_w; ++ox) out[ox] += wv * row[ox * d.stride_w];
      }
    }
}

/** One output plane from the padded copy of its input plane: PlanePadded for square 3x3 and 5x5
 *  kernels of column stride 1 or 2 and no column dilation, else PlanePaddedAny. */
void Plane(const float* x, const float* w, const Depthwise2d& d, float* y) {
  thread_local std::vector<float> buf;  // the pool's threads each have theirs
  const int64_t cols = PadPlane(x, d, buf);
  const PaddedPlaneFn padded = PaddedPlaneFor(d);
  (padded ? padded : PlanePaddedAny)(buf.data(), cols, w, d, y);
}

/** The bias added to a finished plane: the sum rounded, then the bias added, as the Add after
 *  the convolution did (and ORT's kernels do), while the plane is still in cache. */
MLX_EP_CLONES void AddToPlane(float* y, int64_t n, float b) {
  for (int64_t i = 0; i < n; ++i) y[i] += b;
}

// Below this many multiply-adds one thread is faster than waking others (as in quantized_cpu.cc).
constexpr int64_t kMinParallelWork = 1 << 16;

class DepthwiseConvCpu : public ConvCpuPrimitive<Depthwise2d> {
 public:
  DepthwiseConvCpu(mx::Stream stream, Depthwise2d d, ConvActivation act = {})
      : ConvCpuPrimitive(stream, d, act) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(
        name(), stream(), inputs, out, [d = d_, act = act_](const std::vector<mx::array>& in, mx::array& y) {
          const int64_t batch = in[0].shape(0), channels = in[0].shape(1), m = y.shape(1);
          const int64_t in_plane = d.in_h * d.in_w, out_plane = d.out_h * d.out_w;
          const int kernel = d.kernel_h * d.kernel_w;
          const float *x = in[0].data<float>(), *w = in[1].data<float>();
          const float* bias = d.bias ? in[2].data<float>() : nullptr;
          float* dst = y.data<float>();
          const int64_t planes = batch * m;
          nbits_cpu::RunRanges(
              planes, planes * out_plane * kernel, kMinParallelWork, [&](int64_t begin, int64_t end) {
                for (int64_t p = begin; p < end; ++p) {
                  const int64_t n = p / m, oc = p % m;
                  float* out = dst + p * out_plane;
                  Plane(x + (n * channels + oc / d.channels_per_group) * in_plane, w + oc * kernel, d, out);
                  if (bias) AddToPlane(out, out_plane, bias[oc]);
                  if (act.kind != ConvActivation::Kind::kNone) ActivateValues(act, out, out_plane);
                }
              });
        });
  }

  const char* name() const override { return "DepthwiseConvCpu"; }
};

}  // namespace

std::optional<mx::array> DepthwiseConvOnCpu(const mx::array& x, const mx::array& w, int groups,
                                            const ConvGeometry& g, mx::Stream s,
                                            const std::optional<mx::array>& bias) {
  static const bool off = EnvOff(env::kConvCpuKernel);
  const std::optional<Geometry2d> g2 = As2d(x, g);
  if (off || !g2 || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32 ||
      w.dtype() != mx::float32 || x.shape(1) != groups || w.shape(1) != 1 || w.shape(0) % groups != 0)
    return std::nullopt;
  if (bias && (bias->dtype() != mx::float32 || bias->size() != static_cast<size_t>(w.shape(0))))
    return std::nullopt;
  Depthwise2d d;
  static_cast<Geometry2d&>(d) = *g2;
  d.channels_per_group = w.shape(0) / groups;
  d.bias = bias.has_value();
  mx::Shape shape = {x.shape(0), w.shape(0)};
  for (int o : g.out) shape.push_back(o);
  std::vector<mx::array> inputs = {x, w};
  if (bias) inputs.push_back(*bias);
  return mx::array(std::move(shape), mx::float32, std::make_shared<DepthwiseConvCpu>(s, d),
                   std::move(inputs));
}

std::optional<mx::array> ActivatedDepthwiseConv(const mx::array& x, const ConvActivation& act) {
  if (!x.has_primitive() || x.is_available()) return std::nullopt;
  auto* conv = dynamic_cast<DepthwiseConvCpu*>(&x.primitive());
  if (!conv || conv->activation().kind != ConvActivation::Kind::kNone) return std::nullopt;
  auto primitive = std::make_shared<DepthwiseConvCpu>(conv->stream(), conv->geometry(), act);
  return mx::array(x.shape(), mx::float32, std::move(primitive), x.inputs());
}

}  // namespace conv_util
}  // namespace mlx_ep
