// The column matrix of a dense or grouped convolution on MLX's CPU device as one primitive of the
// EP's (conv_internal.h, Im2ColOnCpu), and the whole convolution as one (ConvGemmOnCpu), part of
// the convolution family.
//
// ConvCpu's composed form pads X (a copy), views the padded input as (N, G, C/G, *K, *O) windows
// and copies them into the column matrix through MLX's general strided copy, which walks every
// element's index (11% of a YOLO export's CPU profile). Here the matrix is written row by row:
// each (channel, kernel position) row is its input plane's rows at that offset, a contiguous copy
// for stride 1 and a strided one otherwise, zeros where the window reads the padding.
//
// Where the EP reaches BLAS itself (blas.h, HaveSgemm), the convolution is one primitive: the
// column matrices into a scratch buffer (none for a pointwise convolution: X's planes are its
// rows), their products with W's rows into Y's channels-first rows, and the activation that
// alone reads the output (conv_activation.h) on each block of rows just written. The composed
// form was four to six primitives a convolution (the column matrix, W's broadcast over the batch,
// the product, the reshapes around it) and one for the activation, each a task on MLX's CPU
// stream every run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "blas/blas.h"
#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/conv_activation.h"
#include "ops/conv_cpu_primitive.h"
#include "ops/conv_internal.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"
#include "ops/unary_cpu.h"

namespace mlx_ep {
namespace conv_util {
namespace {

/** The geometry of a 1-D or 2-D convolution as 2-D, and its groups. */
struct Im2Col2d : Geometry2d {
  int groups = 1;
  bool ones_row = false;  ///< one group: a row of ones after each batch entry's rows (the bias's)
  bool operator==(const Im2Col2d&) const = default;
};

/** The output positions [begin, end) along one axis whose input position o * stride + offset lies in
 *  [0, in); `offset` = k * dilation - pad. */
std::pair<int64_t, int64_t> ValidRange(int64_t offset, int stride, int64_t in, int64_t out) {
  // o >= ceil(-offset / stride) and o <= floor((in - 1 - offset) / stride).
  auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
  const int64_t begin = std::max<int64_t>(0, -floor_div(offset, stride));
  const int64_t end = std::min<int64_t>(out, floor_div(in - 1 - offset, stride) + 1);
  return {begin, std::max(begin, end)};
}

/** The rows of input plane `x` (in_h, in_w) for kernel position (ky, kx): out_h * out_w values. */
MLX_EP_CLONES void PlaneRow(const float* x, const Im2Col2d& d, int ky, int kx, float* row) {
  const int64_t off_h = static_cast<int64_t>(ky) * d.dilation_h - d.pad_h;
  const int64_t off_w = static_cast<int64_t>(kx) * d.dilation_w - d.pad_w;
  const auto [oy0, oy1] = ValidRange(off_h, d.stride_h, d.in_h, d.out_h);
  const auto [ox0, ox1] = ValidRange(off_w, d.stride_w, d.in_w, d.out_w);
  // Windows that span whole input rows at stride 1 (a width-1 kernel on (H, W) planes without
  // padding along W, as exporters lay out 1-D convolutions, e.g. Magika's (512, 1); or the centre
  // column of a kernel padded to keep W): the valid output rows are one contiguous run of the
  // input, one copy instead of a copy per row (per value when W is 1: 27% of such a convolution's
  // CPU time went to those calls).
  if (d.stride_h == 1 && d.stride_w == 1 && off_w == 0 && d.out_w == d.in_w && oy0 < oy1) {
    std::fill(row, row + oy0 * d.out_w, 0.f);
    const float* in = x + (oy0 + off_h) * d.in_w;
    std::copy(in, in + (oy1 - oy0) * d.in_w, row + oy0 * d.out_w);
    std::fill(row + oy1 * d.out_w, row + d.out_h * d.out_w, 0.f);
    return;
  }
  for (int64_t oy = 0; oy < d.out_h; ++oy) {
    float* out = row + oy * d.out_w;
    if (oy < oy0 || oy >= oy1 || ox0 >= ox1) {
      std::fill(out, out + d.out_w, 0.f);
      continue;
    }
    const float* in = x + (oy * d.stride_h + off_h) * d.in_w + off_w;
    std::fill(out, out + ox0, 0.f);
    if (d.stride_w == 1) {
      std::copy(in + ox0, in + ox1, out + ox0);
    } else {
      for (int64_t ox = ox0; ox < ox1; ++ox) out[ox] = in[ox * d.stride_w];
    }
    std::fill(out + ox1, out + d.out_w, 0.f);
  }
}

using nbits_cpu::kMinParallelValues;  // quantized_cpu.h

/** The column rows of every (batch entry n, channel c) plane of `x` into `cols`: its K rows (one a
 *  kernel position, out_h * out_w values each) from row n * entry_rows + c * K, over the pool's
 *  threads, all planes in one loop (one entry's few channels, 3 for an image, would not spread). */
void WriteColumns(const float* x, const Im2Col2d& d, int64_t batch, int64_t channels, int64_t entry_rows,
                  float* cols) {
  const int64_t kernel = static_cast<int64_t>(d.kernel_h) * d.kernel_w;
  const int64_t in_plane = d.in_h * d.in_w, rows_out = d.out_h * d.out_w, planes = batch * channels;
  nbits_cpu::RunRanges(
      planes, planes * kernel * rows_out, kMinParallelValues, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          float* plane_rows = cols + ((p / channels) * entry_rows + (p % channels) * kernel) * rows_out;
          for (int ky = 0; ky < d.kernel_h; ++ky)
            for (int kx = 0; kx < d.kernel_w; ++kx)
              PlaneRow(x + p * in_plane, d, ky, kx, plane_rows + (ky * d.kernel_w + kx) * rows_out);
        }
      });
}

class Im2ColCpu : public ConvCpuPrimitive<Im2Col2d> {
 public:
  Im2ColCpu(mx::Stream stream, Im2Col2d d) : ConvCpuPrimitive(stream, d, {}) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(name(), stream(), inputs, out,
                      [d = d_](const std::vector<mx::array>& in, mx::array& y) {
                        const int64_t batch = in[0].shape(0), channels = in[0].shape(1);
                        const int64_t kernel = static_cast<int64_t>(d.kernel_h) * d.kernel_w;
                        const int64_t rows_out = d.out_h * d.out_w;
                        float* cols = y.data<float>();
                        // (N, G, C/G * K, O) is (N, C, K, O) in memory, a batch entry's rows
                        // ending with the ones row when there is one.
                        const int64_t ones = d.ones_row ? 1 : 0, entry_rows = channels * kernel + ones;
                        WriteColumns(in[0].data<float>(), d, batch, channels, entry_rows, cols);
                        for (int64_t n = 0; n < batch && ones; ++n) {
                          float* row = cols + (n * entry_rows + channels * kernel) * rows_out;
                          std::fill(row, row + rows_out, 1.f);
                        }
                      });
  }

  const char* name() const override { return "Im2ColCpu"; }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    const int cg = inputs[0].shape(1) / d_.groups;
    return {{inputs[0].shape(0), d_.groups, cg * d_.kernel_h * d_.kernel_w + (d_.ones_row ? 1 : 0),
             static_cast<int>(d_.out_h * d_.out_w)}};
  }
};

/** A float32 buffer of MLX's allocator (its cache) for the duration of a task. */
class Scratch {
 public:
  explicit Scratch(int64_t values)
      : data_(mx::allocator::malloc(static_cast<size_t>(values) * sizeof(float))) {}
  float* data() { return static_cast<float*>(data_.buffer().raw_ptr()); }

 private:
  mx::allocator::Data data_;  // freed with it
};

/** A 1x1 kernel reading every input position once: X's planes are the column matrix. */
bool Pointwise(const Im2Col2d& d) {
  return d.kernel_h == 1 && d.kernel_w == 1 && d.stride_h == 1 && d.stride_w == 1 && d.pad_h == 0 &&
         d.pad_w == 0 && d.out_h == d.in_h && d.out_w == d.in_w;
}

/** `act` of n float32 values in place, as the composed forms compute it: MLX's float maximum(a, b)
 *  is `isnan(a) ? a : (a > b ? a : b)`, minimum the same with `<`; Clip's bounds are not NaN.
 *  (This file is built without floating-point contraction: no fused multiply-adds.) */
MLX_EP_CLONES void ActivateRange(const ConvActivation& act, float* y, int64_t n) {
  using Kind = ConvActivation::Kind;
  auto hard_sigmoid = [&](float v) {
    const float lin = act.a * v + act.b;
    const float low = std::isnan(lin) || lin < 1.f ? lin : 1.f;
    return std::isnan(low) || low > 0.f ? low : 0.f;
  };
  switch (act.kind) {
    case Kind::kNone:
      return;
    case Kind::kRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = std::isnan(y[i]) || y[i] > 0.f ? y[i] : 0.f;
      return;
    case Kind::kClip:
      for (int64_t i = 0; i < n; ++i) {
        const float v = act.a > y[i] ? act.a : y[i];
        y[i] = act.b < v ? act.b : v;
      }
      return;
    case Kind::kHardSigmoid:
      for (int64_t i = 0; i < n; ++i) y[i] = hard_sigmoid(y[i]);
      return;
    case Kind::kHardSwish:
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] * hard_sigmoid(y[i]);
      return;
    case Kind::kLeakyRelu:
      for (int64_t i = 0; i < n; ++i) y[i] = y[i] >= 0.f ? y[i] : act.a * y[i];
      return;
    case Kind::kSilu:
      ExpFormValues(ExpForm::kSilu, y, y, n);  // SiluCpu's values
      return;
  }
}

/** X (N, C, *S) float32, W (M, C/G * K) and an optional bias (M) to Y (N, M, *O): every batch
 *  entry's column matrix into a scratch buffer (none for a pointwise convolution: X's planes are
 *  its rows), then per entry and group Y's rows = W's rows @ its rows, the bias written into Y
 *  first (beta = 1: BLAS adds the sum to it, as the composed form's mx::addmm). */
class ConvGemmCpu : public ConvCpuPrimitive<Im2Col2d> {
 public:
  ConvGemmCpu(mx::Stream stream, Im2Col2d d, ConvActivation act = {}) : ConvCpuPrimitive(stream, d, act) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(
        name(), stream(), inputs, out, [d = d_, act = act_](const std::vector<mx::array>& in, mx::array& y) {
          const int64_t batch = in[0].shape(0), channels = in[0].shape(1), m = in[1].shape(0);
          const int64_t cg = channels / d.groups, mg = m / d.groups,
                        kernel = int64_t{d.kernel_h} * d.kernel_w;
          const int64_t rows = cg * kernel, positions = d.out_h * d.out_w, in_plane = d.in_h * d.in_w;
          const float* bias = in.size() > 2 ? in[2].data<float>() : nullptr;
          const float* x = in[0].data<float>();
          std::optional<Scratch> cols;  // every entry's column matrix, (N, C, K, O), then the products
          if (!Pointwise(d)) {
            cols.emplace(batch * channels * kernel * positions);
            WriteColumns(x, d, batch, channels, channels * kernel, cols->data());
          }
          for (int64_t n = 0; n < batch; ++n)
            for (int64_t g = 0; g < d.groups; ++g) {
              // Group g's rows of entry n: its channels' planes, or their kernel positions' rows.
              const int64_t first = n * channels + g * cg;
              const float* b = cols ? cols->data() + first * kernel * positions : x + first * in_plane;
              float* out_rows = y.data<float>() + (n * m + g * mg) * positions;
              for (int64_t r = 0; bias && r < mg; ++r)
                std::fill(out_rows + r * positions, out_rows + (r + 1) * positions, bias[g * mg + r]);
              SgemmRowMajor(static_cast<int>(mg), static_cast<int>(positions), static_cast<int>(rows),
                            in[1].data<float>() + g * mg * rows, static_cast<int>(rows), b,
                            static_cast<int>(positions), bias ? 1.f : 0.f, out_rows,
                            static_cast<int>(positions));
              if (act.kind != ConvActivation::Kind::kNone)
                nbits_cpu::RunRanges(
                    mg * positions, mg * positions, kMinParallelValues,
                    [&](int64_t begin, int64_t end) { ActivateRange(act, out_rows + begin, end - begin); },
                    /*grain=*/4096);
            }
        });
  }

  const char* name() const override { return "ConvGemmCpu"; }
};

}  // namespace

std::optional<mx::array> Im2ColOnCpu(const mx::array& x, int groups, const ConvGeometry& g, mx::Stream s,
                                     bool ones_row) {
  static const bool off = EnvOff(env::kConvCpuKernel);
  const std::optional<Geometry2d> g2 = As2d(x, g);
  if (off || !g2 || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32 || groups < 1 ||
      x.shape(1) % groups != 0 || (ones_row && groups != 1))
    return std::nullopt;
  Im2Col2d d;
  static_cast<Geometry2d&>(d) = *g2;
  d.groups = groups;
  d.ones_row = ones_row;
  const int cg = x.shape(1) / groups;
  const mx::Shape shape = {x.shape(0), groups, cg * d.kernel_h * d.kernel_w + (ones_row ? 1 : 0),
                           static_cast<int>(d.out_h * d.out_w)};
  return mx::array(shape, mx::float32, std::make_shared<Im2ColCpu>(s, d), {x});
}

std::optional<mx::array> ConvGemmOnCpu(const mx::array& x, const mx::array& w, int groups,
                                       const ConvGeometry& g, mx::Stream s,
                                       const std::optional<mx::array>& bias) {
  static const bool off = EnvOff(env::kConvCpuKernel);
  const std::optional<Geometry2d> g2 = As2d(x, g);
  if (off || !HaveSgemm() || !g2 || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32 ||
      w.dtype() != mx::float32 || groups < 1 || x.shape(1) % groups != 0 || w.shape(0) % groups != 0 ||
      (groups > 1 && x.shape(1) == groups) ||  // depthwise: a product of one row a group (DepthwiseConvOnCpu)
      x.size() == 0 || w.size() == 0 || g2->out_h * g2->out_w == 0 ||
      (bias && (bias->dtype() != mx::float32 || bias->size() != static_cast<size_t>(w.shape(0)))))
    return std::nullopt;
  Im2Col2d d;
  static_cast<Geometry2d&>(d) = *g2;
  d.groups = groups;
  const int m = w.shape(0), rows = static_cast<int>(w.size() / m);
  std::vector<mx::array> inputs = {x, mx::reshape(w, {m, rows}, s)};  // a constant W's reshape folds
  if (bias) inputs.push_back(mx::reshape(*bias, {m}, s));
  auto primitive = std::make_shared<ConvGemmCpu>(s, d);
  mx::Shape shape = primitive->output_shapes(inputs)[0];
  return mx::array(std::move(shape), mx::float32, std::move(primitive), std::move(inputs));
}

}  // namespace conv_util

void ActivateValues(const ConvActivation& act, float* y, int64_t n) { conv_util::ActivateRange(act, y, n); }

std::optional<mx::array> ActivatedConv(const mx::array& x, const ConvActivation& act) {
  if (!x.has_primitive() || x.is_available()) return std::nullopt;
  auto* conv = dynamic_cast<conv_util::ConvGemmCpu*>(&x.primitive());
  if (!conv) return conv_util::ActivatedDepthwiseConv(x, act);
  if (conv->activation().kind != ConvActivation::Kind::kNone) return std::nullopt;
  auto primitive = std::make_shared<conv_util::ConvGemmCpu>(conv->stream(), conv->geometry(), act);
  return mx::array(x.shape(), mx::float32, std::move(primitive), x.inputs());
}

}  // namespace mlx_ep
