// Op family: Conv (here) and ConvTranspose (ops/conv_transpose.cc), 1-D to 3-D, on
// mx::conv_general.
//
//  - Layout: ONNX convolves channels-first (N, C, *S) with W (M, C/group, *K); MLX channels-last
//    (N, *S, C) with W (M, *K, C/group). Each node transposes X and W to channels-last, convolves,
//    adds the bias and transposes back (docs/conv_layout.md has the measurements behind it).
//  - Padding follows ORT's CPU kernels (conv_attributes.h): explicit pads, VALID, and SAME_UPPER /
//    SAME_LOWER padding to ceil(in / stride) with the odd pixel at the end / the beginning. SAME's
//    total can be negative (kernel < stride); conv_general then drops the input pixels no window
//    reaches, as ORT does. ORT multiplies the padding's zeros too (an inf weight there gives NaN):
//    on GPUs X is padded explicitly unless W is a constant known to be finite.
//  - Declined where ORT's CPU EP rejects the node (auto_pad together with pads, SAME with
//    dilations != 1) and for float64 (MLX's convolution has no float64 kernel).
//  - float16/bfloat16: MLX's convolution accumulates in float32 and rounds once; with a bias the
//    node runs in float32 and rounds once after the bias, like a float32 kernel.
//  - Pointwise convolutions (1x1, no padding, one group) are matrix products in ONNX's layout.
//  - Grouped 3-D convolutions (conv_general takes groups for 1-D and 2-D only) run one convolution
//    per group, concatenated along the channels.
//  - On MLX's CPU device no conv_general: im2col + matmul (BLAS), or a sum over kernel positions for
//    depthwise ones, in ONNX's layout (ops/conv_cpu.cc); as precise as ORT's CPU EP and 2-50x
//    faster than conv_general there. float16/bfloat16 then always compute in float32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "ops/claim_util.h"
#include "ops/conv_internal.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace conv_util {

std::optional<AutoPad> ReadAutoPad(const Node& n) {
  const std::string s = n.AttrString("auto_pad", "NOTSET");
  if (s == "NOTSET") return AutoPad::kNotSet;
  if (s == "SAME_UPPER") return AutoPad::kSameUpper;
  if (s == "SAME_LOWER") return AutoPad::kSameLower;
  if (s == "VALID") return AutoPad::kValid;
  return std::nullopt;
}

namespace {

/** Why the list attribute `name` is unusable ("" if fine): its length must be `per_dim` * nd
 *  (when the rank is known) and every value at least `min`. */
std::string ListReason(const Node& n, const char* name, std::optional<int64_t> nd, int per_dim, int64_t min) {
  const auto values = n.AttrInts(name);
  if (!values || values->empty()) return "";
  if (nd && static_cast<int64_t>(values->size()) != per_dim * *nd)
    return std::string("attribute ") + name + " has " + std::to_string(values->size()) + " values for " +
           std::to_string(*nd) + " spatial dims";
  for (int64_t x : *values)
    if (x < min) return std::string("attribute ") + name + " holds " + std::to_string(x);
  return "";
}

/** The attribute reasons of ClaimReason. */
std::string AttrReason(const Node& n, std::optional<int64_t> nd, bool transpose) {
  const std::optional<AutoPad> auto_pad = ReadAutoPad(n);
  if (!auto_pad) return "attribute auto_pad=" + n.AttrString("auto_pad", "") + " is not an ONNX mode";
  if (n.AttrInt("group", 1) < 1) return "attribute group=" + std::to_string(n.AttrInt("group", 1));
  for (auto [name, per_dim, min] : {std::tuple<const char*, int, int64_t>{"kernel_shape", 1, 1},
                                    {"strides", 1, 1},
                                    {"dilations", 1, 1},
                                    {"pads", 2, 0},
                                    {"output_padding", 1, 0}})
    if (std::string r = ListReason(n, name, nd, per_dim, min); !r.empty()) return r;
  if (n.Attr("pads") && *auto_pad != AutoPad::kNotSet)
    return "attributes pads and auto_pad together (ORT's CPU EP rejects the node)";
  const bool same = *auto_pad == AutoPad::kSameUpper || *auto_pad == AutoPad::kSameLower;
  const std::vector<int64_t> dilations = n.AttrInts("dilations").value_or(std::vector<int64_t>{});
  if (!transpose && same)
    for (int64_t d : dilations)
      if (d != 1) return "auto_pad SAME_* with dilations != 1 (ORT's CPU EP rejects the node)";
  if (!transpose) return "";
  const std::vector<int64_t> strides = n.AttrInts("strides").value_or(std::vector<int64_t>{});
  const std::vector<int64_t> adj = n.AttrInts("output_padding").value_or(std::vector<int64_t>{});
  for (size_t i = 0; i < adj.size(); ++i)
    if (adj[i] >= (i < strides.size() ? strides[i] : 1))
      return "output_padding not below the stride (ORT's CPU EP rejects the node)";
  return ListReason(n, "output_shape", nd, 1, 1);
}

}  // namespace

std::string ClaimReason(const NodeView& v, bool transpose) {
  const ElemType t = v.input_type(0);
  if (t == ElemType::kDouble) return "float64: MLX's convolution has no float64 kernel";
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16})) return TypeReason(v, 0);
  if (v.input_type(1) != t || (v.has_input(2) && v.input_type(2) != t))
    return "W or B differs in type from X";
  if (v.output_type(0) != t) return "output type differs from the input type";
  const auto x_rank = v.input_rank(0), w_rank = v.input_rank(1);
  if (x_rank && w_rank && *x_rank != *w_rank) return "X and W have different ranks";
  const std::optional<int64_t> rank = x_rank ? x_rank : w_rank;
  if (rank && (*rank < 3 || *rank > 5))
    return "rank " + std::to_string(*rank) + " (MLX convolves 1 to 3 spatial dims)";
  std::optional<int64_t> nd;
  if (rank) nd = *rank - 2;
  return AttrReason(v.node(), nd, transpose);
}

int ToInt(const OpContext& c, int64_t v, const char* what) {
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    c.Fail(std::string(what) + " " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

ConvAttrs ReadAttrs(const OpContext& c, const mx::array& x, const mx::array& w, bool transpose) {
  const Node& n = c.node;
  if (x.ndim() != w.ndim()) c.Fail("X and W have different ranks");
  const int nd = static_cast<int>(x.ndim()) - 2;
  if (nd < 1 || nd > 3)
    c.Fail("X has rank " + std::to_string(x.ndim()) + "; 1 to 3 spatial dims are supported");
  ConvAttrs a;
  a.auto_pad = ReadAutoPad(n).value_or(AutoPad::kNotSet);
  a.group = ToInt(c, n.AttrInt("group", 1), "group");
  a.kernel.assign(w.shape().begin() + 2, w.shape().end());
  if (const auto k = n.AttrInts("kernel_shape"); k && *k != a.kernel)
    c.Fail("kernel_shape differs from W's shape");
  auto list = [&](const char* name, size_t size, int64_t fallback) {
    std::vector<int64_t> v = n.AttrInts(name).value_or(std::vector<int64_t>{});
    if (v.empty()) v.assign(size, fallback);
    if (v.size() != size)
      c.Fail(std::string("attribute ") + name + " has " + std::to_string(v.size()) + " values");
    return v;
  };
  a.strides = list("strides", nd, 1);
  a.dilations = list("dilations", nd, 1);
  a.pads = list("pads", 2 * nd, 0);
  if (transpose) {
    a.output_padding = list("output_padding", nd, 0);
    a.output_shape = n.AttrInts("output_shape").value_or(std::vector<int64_t>{});
    if (!a.output_shape.empty() && a.output_shape.size() != static_cast<size_t>(nd))
      c.Fail("attribute output_shape has " + std::to_string(a.output_shape.size()) + " values");
  }
  if (a.group < 1) c.Fail("group must be positive");
  return a;
}

mx::array ToChannelsLast(const mx::array& a, mx::Stream s) {
  std::vector<int> perm = {0};
  for (int i = 2; i < static_cast<int>(a.ndim()); ++i) perm.push_back(i);
  perm.push_back(1);
  return mx::transpose(a, perm, s);
}

mx::array ToChannelsFirst(const mx::array& a, mx::Stream s) {
  std::vector<int> perm = {0, static_cast<int>(a.ndim()) - 1};
  for (int i = 1; i < static_cast<int>(a.ndim()) - 1; ++i) perm.push_back(i);
  return mx::transpose(a, perm, s);
}

mx::array ConvChannelsLast(const mx::array& x, const mx::array& w, const std::vector<int>& strides,
                           const std::vector<int>& lo, const std::vector<int>& hi,
                           const std::vector<int>& kernel_dilation, const std::vector<int>& input_dilation,
                           int groups, bool flip, mx::Stream s) {
  if (groups == 1 || x.ndim() < 5)
    return mx::conv_general(x, w, strides, lo, hi, kernel_dilation, input_dilation, groups, flip, s);
  const int last = static_cast<int>(x.ndim()) - 1;
  const std::vector<mx::array> xs = mx::split(x, groups, last, s);
  const std::vector<mx::array> ws = mx::split(w, groups, 0, s);
  std::vector<mx::array> ys;
  for (int g = 0; g < groups; ++g)
    ys.push_back(
        mx::conv_general(xs[g], ws[g], strides, lo, hi, kernel_dilation, input_dilation, 1, flip, s));
  return mx::concatenate(ys, last, s);
}

mx::Dtype ComputeDtype(const OpContext& c, mx::Dtype dt) {
  return c.has_input(2) && (dt == mx::float16 || dt == mx::bfloat16) ? mx::float32 : dt;
}

mx::array Bias(const OpContext& c, int m, mx::Dtype dt) {
  const mx::array& b = c.input(2);
  if (b.ndim() != 1 || b.shape(0) != m)
    c.Fail("B must hold one value per output channel (" + std::to_string(m) + ")");
  return mx::astype(b, dt, c.stream);
}

mx::array FinishOutput(const OpContext& c, mx::array y, mx::Dtype dt) {
  if (c.has_input(2)) y = mx::add(y, Bias(c, y.shape(-1), y.dtype()), c.stream);
  return ToChannelsFirst(mx::astype(y, dt, c.stream), c.stream);
}

mx::array AddBiasChannelsFirst(const OpContext& c, const mx::array& y) {
  if (!c.has_input(2)) return y;
  mx::Shape b_shape(y.ndim(), 1);
  b_shape[1] = y.shape(1);
  return mx::add(y, mx::reshape(Bias(c, y.shape(1), y.dtype()), b_shape, c.stream), c.stream);
}

mx::array EmptyConvOutput(const OpContext& c, const mx::Shape& shape, mx::Dtype dt) {
  mx::array y = mx::zeros(shape, dt, c.stream);
  if (!c.has_input(2)) return y;
  mx::Shape b_shape(shape.size(), 1);
  b_shape[1] = shape[1];
  return mx::add(y, mx::reshape(Bias(c, shape[1], dt), b_shape, c.stream), c.stream);
}

}  // namespace conv_util

namespace {

using namespace conv_util;

Claim ClaimConv(const NodeView& v) {
  std::string reason = ClaimReason(v, /*transpose=*/false);
  return reason.empty() ? Claim::Yes() : Claim::No(std::move(reason));
}

/** Padding (head, tail; either may be negative for SAME) and output size of one spatial dim,
 *  as ORT's ComputePadAndOutputShape computes them. */
struct ConvDim {
  int64_t head, tail, out;
};

ConvDim ConvDimOf(const OpContext& c, const ConvAttrs& a, int i, int64_t in) {
  const int nd = static_cast<int>(a.kernel.size());
  const int64_t k = a.kernel[i], s = a.strides[i], d = a.dilations[i];
  const int64_t dk = d * (k - 1) + 1;
  ConvDim r{a.pads[i], a.pads[nd + i], 0};
  if (a.auto_pad == AutoPad::kValid) r.head = r.tail = 0;
  if (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower) {
    const int64_t target = (in + s - 1) / s;  // ceil(in / stride)
    const int64_t total = (target - 1) * s + k - in;
    // C++ division, truncating like ORT's for a negative total.
    r.head = a.auto_pad == AutoPad::kSameLower ? (total + 1) / 2 : total / 2;
    r.tail = total - r.head;
  }
  const int64_t span = in + r.head + r.tail - dk;
  if (span < 0) c.Fail("spatial dim " + std::to_string(i) + ": the padded input is smaller than the kernel");
  r.out = span / s + 1;
  return r;
}

/** True for a 1x1 convolution without padding or groups (strides allowed). */
bool IsPointwise(const ConvAttrs& a, const std::vector<int>& lo, const std::vector<int>& hi) {
  if (a.group != 1) return false;
  for (size_t i = 0; i < a.kernel.size(); ++i)
    if (a.kernel[i] != 1 || lo[i] != 0 || hi[i] != 0) return false;
  return true;
}

/** A pointwise convolution as the matrix product W (M, C) @ X (N, C, S) in ONNX's own layout (the
 *  strides subsample X first): no transposes, and on MLX's CPU about twice as fast as
 *  conv_general (docs/conv_layout.md). */
mx::array PointwiseConv(const OpContext& c, mx::array x, const mx::array& w, const std::vector<int>& strides,
                        const mx::Shape& out_shape, mx::Dtype ct) {
  const mx::Stream s = c.stream;
  if (std::any_of(strides.begin(), strides.end(), [](int v) { return v != 1; })) {
    mx::Shape step = {1, 1};
    step.insert(step.end(), strides.begin(), strides.end());
    x = mx::slice(x, mx::Shape(x.ndim(), 0), x.shape(), step, s);
  }
  const int n = x.shape(0), channels = x.shape(1), m = w.shape(0);
  const mx::array wm = mx::reshape(mx::astype(w, ct, s), {m, channels}, s);
  const mx::array xm = mx::reshape(mx::astype(x, ct, s), {n, channels, -1}, s);
  std::optional<mx::array> y;  // (N, M, S)
  // On MLX's CPU device BLAS adds the bias (ConvCpu's reason); GPUs keep the Add (cuBLASLt's bias
  // epilogue is per column, this bias is per row).
  if (c.has_input(2) && RuntimeDevice() == mx::Device(mx::Device::cpu))
    y = mx::addmm(mx::reshape(Bias(c, m, ct), {m, 1}, s), wm, xm, 1.0f, 1.0f, s);
  else if (c.has_input(2))
    y = mx::add(mx::matmul(wm, xm, s), mx::reshape(Bias(c, m, ct), {m, 1}, s), s);
  else
    y = mx::matmul(wm, xm, s);
  return mx::reshape(mx::astype(*y, c.output_dtype(0), s), out_shape, s);
}

/** True when `w`'s values are known now (a constant of the trace, not a traced or computed value)
 *  and all finite. Read on the host once per trace. */
bool KnownFinite(const mx::array& w) {
  if (w.is_tracer() || w.has_primitive() || w.status() != mx::array::Status::available ||
      !w.flags().row_contiguous)
    return false;
  auto all_finite = [&](const auto* p) {
    for (size_t i = 0; i < w.size(); ++i)
      if (!std::isfinite(static_cast<float>(p[i]))) return false;
    return true;
  };
  if (w.dtype() == mx::float32) return all_finite(w.data<float>());
  if (w.dtype() == mx::float16) return all_finite(w.data<mx::float16_t>());
  if (w.dtype() == mx::bfloat16) return all_finite(w.data<mx::bfloat16_t>());
  return false;
}

/** X (channels-last) padded explicitly by the positive parts of `lo` / `hi` on GPUs, where W may
 *  hold inf or NaN: ORT's CPU kernel multiplies the padding's zeros too (0 * inf is NaN), cuDNN
 *  leaves padding out of its sums. `lo` / `hi` keep only their negative parts (crops) then. Real
 *  models' weights are finite constants: they keep conv_general's own padding, no extra copy. */
mx::array PadForNonFiniteWeights(const mx::array& xl, const mx::array& w, std::vector<int>& lo,
                                 std::vector<int>& hi, mx::Stream s) {
  const bool pads = std::any_of(lo.begin(), lo.end(), [](int v) { return v > 0; }) ||
                    std::any_of(hi.begin(), hi.end(), [](int v) { return v > 0; });
  if (!pads || KnownFinite(w)) return xl;
  std::vector<int> axes;
  mx::Shape pad_lo, pad_hi;
  for (size_t i = 0; i < lo.size(); ++i) {
    axes.push_back(static_cast<int>(i) + 1);
    pad_lo.push_back(std::max(lo[i], 0));
    pad_hi.push_back(std::max(hi[i], 0));
    lo[i] = std::min(lo[i], 0);
    hi[i] = std::min(hi[i], 0);
  }
  return mx::pad(xl, axes, pad_lo, pad_hi, mx::array(0, xl.dtype()), "constant", s);
}

/** The CPU path (ConvCpu) in compute dtype `ct`, plus the bias, rounded once to the node's type;
 *  `gemm_only` (a pointwise convolution): nullopt unless it is the one primitive of
 *  ConvGemmOnCpu (PointwiseConv's product is faster than the column matrix otherwise). */
std::optional<mx::array> CpuConv(const OpContext& c, const mx::array& x, const mx::array& w,
                                 const ConvAttrs& a, const ConvGeometry& g, mx::Dtype ct, bool gemm_only) {
  const mx::Stream s = c.stream;
  std::optional<mx::array> bias;
  if (c.has_input(2)) bias = Bias(c, w.shape(0), ct);
  const mx::array xc = mx::astype(x, ct, s), wc = mx::astype(w, ct, s);
  std::optional<mx::array> y =
      gemm_only ? ConvGemmOnCpu(xc, wc, a.group, g, s, bias) : ConvCpu(xc, wc, a.group, g, s, bias);
  if (!y) return std::nullopt;
  return mx::astype(*y, c.output_dtype(0), s);
}

std::vector<mx::array> TranslateConv(const OpContext& c) {
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::array& w = c.input(1);
  const ConvAttrs a = ReadAttrs(c, x, w, /*transpose=*/false);
  const int nd = static_cast<int>(x.ndim()) - 2;
  const int channels = x.shape(1), m = w.shape(0);
  if (channels != w.shape(1) * a.group)
    c.Fail("X has " + std::to_string(channels) + " channels; W takes " + std::to_string(w.shape(1)) +
           " x group " + std::to_string(a.group));
  if (m % a.group != 0) c.Fail("W's output channels are not divisible by group");

  std::vector<int> kernel, strides, dilations, lo, hi, out;
  mx::Shape out_shape = {x.shape(0), m};
  for (int i = 0; i < nd; ++i) {
    const ConvDim dim = ConvDimOf(c, a, i, x.shape(2 + i));
    kernel.push_back(w.shape(2 + i));
    out.push_back(ToInt(c, dim.out, "output size"));
    strides.push_back(ToInt(c, a.strides[i], "stride"));
    dilations.push_back(ToInt(c, a.dilations[i], "dilation"));
    lo.push_back(ToInt(c, dim.head, "pad"));
    hi.push_back(ToInt(c, dim.tail, "pad"));
    out_shape.push_back(ToInt(c, dim.out, "output size"));
  }
  const mx::Dtype dt = x.dtype();
  if (x.size() == 0 || w.size() == 0) return {EmptyConvOutput(c, out_shape, dt)};

  const bool cpu = RuntimeDevice() == mx::Device(mx::Device::cpu);
  // The CPU path sums in float32 for float16/bfloat16 (matmul and the depthwise sum), rounding once.
  const mx::Dtype ct = cpu && dt != mx::float32 ? mx::float32 : ComputeDtype(c, dt);
  const bool pointwise = IsPointwise(a, lo, hi);
  if (cpu)
    if (auto y = CpuConv(c, x, w, a, {kernel, strides, dilations, lo, hi, out}, ct, pointwise)) return {*y};
  if (pointwise) return {PointwiseConv(c, x, w, strides, out_shape, ct)};
  const mx::array xl = PadForNonFiniteWeights(ToChannelsLast(mx::astype(x, ct, s), s), w, lo, hi, s);
  const mx::array wl = ToChannelsLast(mx::astype(w, ct, s), s);  // (M, *K, C/group)
  const mx::array y = ConvChannelsLast(xl, wl, strides, lo, hi, dilations, std::vector<int>(nd, 1), a.group,
                                       /*flip=*/false, s);
  return {FinishOutput(c, y, dt)};
}

}  // namespace

void RegisterConvOps(OpRegistry& r) {
  r.Add({"", "Conv", 1, 10, ClaimConv, TranslateConv});
  r.Add({"", "Conv", 11, 25, ClaimConv, TranslateConv});
  AddConvTranspose(r);
}

}  // namespace mlx_ep
