// The column matrix of a dense or grouped convolution on MLX's CPU device as one primitive of the
// EP's (conv_internal.h, Im2ColOnCpu), part of the convolution family.
//
// ConvCpu's composed form pads X (a copy), views the padded input as (N, G, C/G, *K, *O) windows
// and copies them into the column matrix through MLX's general strided copy, which walks every
// element's index (11% of a YOLO export's CPU profile). Here the matrix is written row by row:
// each (channel, kernel position) row is its input plane's rows at that offset, a contiguous copy
// for stride 1 and a strided one otherwise, zeros where the window reads the padding.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/conv_internal.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"

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

class Im2ColCpu : public mx::UnaryPrimitive {
 public:
  Im2ColCpu(mx::Stream stream, Im2Col2d d) : mx::UnaryPrimitive(stream), d_(d) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(
        name(), stream(), inputs, out, [d = d_](const std::vector<mx::array>& in, mx::array& y) {
          const int64_t batch = in[0].shape(0), channels = in[0].shape(1);
          const int64_t kernel = static_cast<int64_t>(d.kernel_h) * d.kernel_w;
          const int64_t in_plane = d.in_h * d.in_w, rows_out = d.out_h * d.out_w;
          const float* x = in[0].data<float>();
          float* cols = y.data<float>();
          // (N, G, C/G * K, O) is (N, C, K, O) in memory: channel c's K rows follow channel c - 1's
          // (and a batch entry's rows end with the ones row when there is one).
          const int64_t planes = batch * channels, ones = d.ones_row ? 1 : 0;
          const int64_t entry_rows = channels * kernel + ones;
          nbits_cpu::RunRanges(
              planes, planes * kernel * rows_out, kMinParallelValues, [&](int64_t begin, int64_t end) {
                for (int64_t p = begin; p < end; ++p) {
                  const int64_t n = p / channels, c = p % channels;
                  float* plane_rows = cols + (n * entry_rows + c * kernel) * rows_out;
                  for (int ky = 0; ky < d.kernel_h; ++ky)
                    for (int kx = 0; kx < d.kernel_w; ++kx)
                      PlaneRow(x + p * in_plane, d, ky, kx, plane_rows + (ky * d.kernel_w + kx) * rows_out);
                }
              });
          for (int64_t n = 0; n < batch && ones; ++n) {
            float* row = cols + (n * entry_rows + channels * kernel) * rows_out;
            std::fill(row, row + rows_out, 1.f);
          }
        });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("Im2ColCpu runs on the CPU only (GPUs take mx::conv_general)");
  }

  const char* name() const override { return "Im2ColCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return d_ == static_cast<const Im2ColCpu&>(other).d_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    const int cg = inputs[0].shape(1) / d_.groups;
    return {{inputs[0].shape(0), d_.groups, cg * d_.kernel_h * d_.kernel_w + (d_.ones_row ? 1 : 0),
             static_cast<int>(d_.out_h * d_.out_w)}};
  }

 private:
  Im2Col2d d_;
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

}  // namespace conv_util
}  // namespace mlx_ep
