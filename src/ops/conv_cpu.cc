// Conv on MLX's CPU device (part of the convolution family, ops/conv.cc), in ONNX's channels-first
// layout and without mx::conv_general.
//
//  - Why: MLX's CPU convolution sums each output in float32 sequentially, 5-7x less precisely than
//    ORT's CPU EP (im2col + blocked SGEMM), and is about 20x slower (docs/conv_layout.md). GPUs
//    keep conv_general (cuDNN).
//  - Dense and grouped convolutions are im2col + matmul, as in ORT's CPU kernel: the padded input
//    is viewed (mx::as_strided) as (N, G, C/G, *K, *O) windows, copied once to the column matrix
//    (N, G, C/G * K, O) and multiplied by W (G, M/G, C/G * K), which MLX's matmul runs in BLAS;
//    1-D and 2-D ones write that matrix in one primitive of the EP's (conv_im2col_cpu.cc).
//  - Depthwise convolutions (one input channel per group) are a sum over the kernel positions of
//    strided views of the padded input times per-channel weights: elementwise, no tiny GEMMs; 1-D
//    and 2-D ones as one primitive of the EP's that computes that sum (conv_depthwise_cpu.cc).
//  - Negative paddings (SAME with kernel < stride) crop the input, as ORT does.
#include <algorithm>
#include <optional>

#include "ops/conv_internal.h"

namespace mlx_ep {
namespace conv_util {
namespace {

/** X (N, C, *S) padded by `lo` / `hi` per spatial dim; negative amounts crop instead. */
mx::array PadOrCrop(mx::array x, const std::vector<int>& lo, const std::vector<int>& hi, mx::Stream s) {
  const int nd = static_cast<int>(lo.size());
  std::vector<int> axes;
  mx::Shape pad_lo, pad_hi, start(x.ndim(), 0), stop = x.shape();
  bool pad = false, crop = false;
  for (int i = 0; i < nd; ++i) {
    axes.push_back(2 + i);
    pad_lo.push_back(std::max(lo[i], 0));
    pad_hi.push_back(std::max(hi[i], 0));
    start[2 + i] = std::max(-lo[i], 0);
    stop[2 + i] = x.shape(2 + i) - std::max(-hi[i], 0);
    pad = pad || lo[i] > 0 || hi[i] > 0;
    crop = crop || lo[i] < 0 || hi[i] < 0;
  }
  if (crop) x = mx::slice(x, start, stop, s);
  if (pad) x = mx::pad(x, axes, pad_lo, pad_hi, mx::array(0, x.dtype()), "constant", s);
  return x;
}

/** Row-contiguous element strides of `a` (as_strided reads its input flattened). */
mx::Strides RowStrides(const mx::array& a) {
  mx::Strides st(a.ndim(), 1);
  for (int i = static_cast<int>(a.ndim()) - 2; i >= 0; --i) st[i] = st[i + 1] * a.shape(i + 1);
  return st;
}

/** Im2col: the column matrix (N, G, C/G * prod(K), prod(O)) of padded X (N, C, *P), one copy. */
mx::array Columns(const mx::array& xp, int groups, const ConvGeometry& g, mx::Stream s) {
  const int nd = static_cast<int>(g.kernel.size());
  const mx::Strides xs = RowStrides(xp);
  const int n = xp.shape(0), cg = xp.shape(1) / groups;
  mx::Shape view_shape = {n, groups, cg};
  mx::Strides view_strides = {xs[0], cg * xs[1], xs[1]};
  int k_size = 1, o_size = 1;
  for (int i = 0; i < nd; ++i) {
    view_shape.push_back(g.kernel[i]);
    view_strides.push_back(static_cast<int64_t>(g.dilations[i]) * xs[2 + i]);
    k_size *= g.kernel[i];
  }
  for (int i = 0; i < nd; ++i) {
    view_shape.push_back(g.out[i]);
    view_strides.push_back(static_cast<int64_t>(g.strides[i]) * xs[2 + i]);
    o_size *= g.out[i];
  }
  const mx::array windows = mx::as_strided(xp, view_shape, view_strides, 0, s);
  return mx::reshape(windows, {n, groups, cg * k_size, o_size}, s);
}

/** Depthwise (C/G == 1): sum over kernel positions of the strided view of padded X (N, G, 1, *O)
 *  times that position's weights (G, M/G, 1...), giving (N, G, M/G, *O). */
mx::array DepthwiseSum(const mx::array& xp, const mx::array& w, int groups, const ConvGeometry& g,
                       mx::Stream s) {
  const int nd = static_cast<int>(g.kernel.size());
  const int mg = w.shape(0) / groups;
  int k_size = 1;
  for (int k : g.kernel) k_size *= k;
  const mx::array wk = mx::reshape(w, {groups, mg, k_size}, s);
  mx::Shape w_shape = {groups, mg};
  w_shape.insert(w_shape.end(), nd, 1);
  std::optional<mx::array> acc;
  for (int k = 0; k < k_size; ++k) {
    mx::Shape start(xp.ndim(), 0), stop = xp.shape(), step(xp.ndim(), 1);
    int rest = k;
    for (int i = nd - 1; i >= 0; --i) {
      const int ki = rest % g.kernel[i];
      rest /= g.kernel[i];
      start[2 + i] = ki * g.dilations[i];
      stop[2 + i] = start[2 + i] + (g.out[i] - 1) * g.strides[i] + 1;
      step[2 + i] = g.strides[i];
    }
    const mx::array view = mx::expand_dims(mx::slice(xp, start, stop, step, s), 2, s);  // (N, G, 1, *O)
    const mx::array wpos = mx::reshape(mx::slice(wk, {0, 0, k}, {groups, mg, k + 1}, s), w_shape, s);
    const mx::array term = mx::multiply(view, wpos, s);
    acc = acc ? mx::add(*acc, term, s) : term;
  }
  return *acc;
}

}  // namespace

mx::Shape OutputShape2d(const Geometry2d& d, int batch, int channels) {
  mx::Shape shape = {batch, channels};
  if (d.spatial_dims == 2) shape.push_back(static_cast<int>(d.out_h));
  shape.push_back(static_cast<int>(d.out_w));
  return shape;
}

std::optional<Geometry2d> As2d(const mx::array& x, const ConvGeometry& g) {
  const size_t nd = g.kernel.size();
  if (nd != 1 && nd != 2) return std::nullopt;
  Geometry2d d;
  const size_t last = nd - 1;  // width; a 2-D kernel's first dim is the height
  d.in_w = x.shape(2 + last);
  d.out_w = g.out[last];
  d.kernel_w = g.kernel[last];
  d.stride_w = g.strides[last];
  d.dilation_w = g.dilations[last];
  d.pad_w = g.lo[last];
  if (nd == 2) {
    d.in_h = x.shape(2);
    d.out_h = g.out[0];
    d.kernel_h = g.kernel[0];
    d.stride_h = g.strides[0];
    d.dilation_h = g.dilations[0];
    d.pad_h = g.lo[0];
  }
  d.spatial_dims = static_cast<int>(nd);
  return d;
}

mx::array ConvCpu(const mx::array& x, const mx::array& w, int groups, const ConvGeometry& g, mx::Stream s,
                  const std::optional<mx::array>& bias) {
  const int n = x.shape(0), m = w.shape(0), cg = w.shape(1);
  mx::Shape out_shape = {n, m};
  out_shape.insert(out_shape.end(), g.out.begin(), g.out.end());
  mx::Shape bias_shape(out_shape.size(), 1);
  bias_shape[1] = m;
  auto plus_bias = [&](const mx::array& y) {
    return bias ? mx::add(y, mx::reshape(*bias, bias_shape, s), s) : y;
  };
  if (cg == 1 && groups > 1) {
    if (auto y = DepthwiseConvOnCpu(x, w, groups, g, s, bias)) return *y;  // the bias added there
    return plus_bias(mx::reshape(DepthwiseSum(PadOrCrop(x, g.lo, g.hi, s), w, groups, g, s), out_shape, s));
  }
  if (auto y = ConvGemmOnCpu(x, w, groups, g, s, bias)) return *y;  // the bias added there
  int ck = cg;
  for (int k : g.kernel) ck *= k;
  // With one group the bias is a column of W times a row of ones in the column matrix: the
  // product adds it, no pass over the output of its own (W's column is a constant, folded once).
  if (bias && groups == 1)
    if (auto cols = Im2ColOnCpu(x, groups, g, s, /*ones_row=*/true)) {
      const mx::array wb =
          mx::concatenate({mx::reshape(w, {1, m, ck}, s), mx::reshape(*bias, {1, m, 1}, s)}, 2, s);
      return mx::reshape(mx::matmul(wb, *cols, s), out_shape, s);
    }
  std::optional<mx::array> im2col = Im2ColOnCpu(x, groups, g, s);
  const mx::array cols =
      im2col ? *im2col : Columns(PadOrCrop(x, g.lo, g.hi, s), groups, g, s);  // (N, G, C/G*K, O)
  const mx::array wm = mx::reshape(w, {groups, m / groups, ck}, s);           // (G, M/G, C/G*K)
  // Otherwise BLAS adds it (C = bias broadcast, beta = 1): no Add pass, no zeroing by BLAS first.
  if (bias && groups == 1)
    return mx::reshape(mx::addmm(mx::reshape(*bias, {m, 1}, s), wm, cols, 1.0f, 1.0f, s), out_shape, s);
  return plus_bias(mx::reshape(mx::matmul(wm, cols, s), out_shape, s));  // (N, G, M/G, O)
}

}  // namespace conv_util
}  // namespace mlx_ep
