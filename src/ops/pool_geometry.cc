// Pooling family: the attribute checks and the window geometry shared by pool.cc and
// pool_global.cc (declared in pool_internal.h). The sizes follow ORT 1.23's CPU kernels and its
// shape inference, which differ in places; see pool.cc's header.
#include <cmath>
#include <limits>

#include "ops/pool_internal.h"

namespace mlx_ep {
namespace pool {

PoolAttrs ReadAttrs(const Node& n) {
  PoolAttrs a;
  a.kernel = n.AttrInts("kernel_shape").value_or(std::vector<int64_t>{});
  const size_t nd = a.kernel.size();
  auto ints = [&](const char* name, size_t size, int64_t fill) {
    std::vector<int64_t> v = n.AttrInts(name).value_or(std::vector<int64_t>{});
    if (v.empty()) v.assign(size, fill);
    return v;
  };
  a.strides = ints("strides", nd, 1);
  a.dilations = ints("dilations", nd, 1);
  a.pads = ints("pads", 2 * nd, 0);
  a.auto_pad = n.AttrString("auto_pad", "NOTSET");
  if (a.auto_pad.empty()) a.auto_pad = "NOTSET";
  a.ceil_mode = n.AttrInt("ceil_mode", 0) != 0;
  return a;
}

std::optional<std::string> AttrsReason(const NodeView& v, bool auto_pad) {
  const Node& n = v.node();
  if (!n.AttrInts("kernel_shape")) return "attribute kernel_shape is missing";
  const PoolAttrs a = ReadAttrs(n);
  const size_t nd = a.kernel.size();
  if (nd == 0 || nd > kMaxSpatialDims) return "kernel_shape has " + std::to_string(nd) + " dims";
  // ORT reads ceil_mode 1 as ceil and anything else as floor (shape inference: != 0): left to it.
  if (const int64_t ceil = n.AttrInt("ceil_mode", 0); ceil != 0 && ceil != 1)
    return "attribute ceil_mode=" + std::to_string(ceil);
  if (a.strides.size() != nd || a.dilations.size() != nd || a.pads.size() != 2 * nd)
    return "strides/dilations/pads do not match kernel_shape's rank";
  for (size_t i = 0; i < nd; ++i) {
    if (a.kernel[i] <= 0 || a.strides[i] <= 0 || a.dilations[i] <= 0)
      return "kernel_shape, strides and dilations must be positive";
    // ORT's kernels refuse these when they are created; declining leaves that error to them.
    if (a.pads[i] < 0 || a.pads[i + nd] < 0) return "negative pads";
    if (a.pads[i] >= a.kernel[i] || a.pads[i + nd] >= a.kernel[i])
      return "pads must be smaller than the kernel";
  }
  if (auto_pad && a.auto_pad != "NOTSET" && a.auto_pad != "VALID" && a.auto_pad != "SAME_UPPER" &&
      a.auto_pad != "SAME_LOWER")
    return "auto_pad=" + a.auto_pad + " is not supported";
  if (const auto rank = v.input_rank(0); rank && *rank != static_cast<int64_t>(nd) + 2)
    return "kernel_shape has " + std::to_string(nd) + " dims for an input of rank " + std::to_string(*rank);
  return std::nullopt;
}

std::optional<std::string> RankReason(const NodeView& v) {
  const auto rank = v.input_rank(0);
  if (rank && (*rank < 3 || *rank > kMaxSpatialDims + 2))
    return "input rank " + std::to_string(*rank) + " (ORT pools 1 to 3 spatial dims)";
  return std::nullopt;
}

void CheckInput(const OpContext& c, const mx::array& x) {
  if (x.ndim() < 3 || x.ndim() > kMaxSpatialDims + 2)
    c.Fail("input rank " + std::to_string(x.ndim()) + " is not supported (1 to 3 spatial dims)");
  if (x.size() == 0 && x.shape(0) != 0) c.Fail("only the batch dimension may be empty");
}

namespace {

// SAME_* pads come out negative where kernel < stride; ORT's kernels then disagree (its MLAS paths
// fail, the others pool the shifted windows), so such nodes are left to ORT.
constexpr const char* kNegativePadsReason = "SAME_* padding with kernel < stride resolves to negative pads";

/** ORT's kernel output size along one dim whose pads are resolved. */
int64_t KernelOutputSize(const Axis& ax, bool ceil_mode) {
  const int64_t num = ax.in + ax.pad_begin + ax.pad_end - ax.dilation * (ax.kernel - 1) - 1;
  if (!ceil_mode) return num / ax.stride + 1;
  auto out = static_cast<int64_t>(std::ceil(static_cast<float>(num) / static_cast<float>(ax.stride) + 1));
  // The last window must start inside the input or its begin padding.
  if ((out - 1) * ax.stride >= ax.in + ax.pad_begin) --out;
  return out;
}

/** The output size ORT's shape inference declares (its own SAME padding, no dropped last window),
 *  or nullopt where the dilated kernel is larger than the padded input. */
std::optional<int64_t> InferredOutputSize(const PoolAttrs& a, size_t i, int64_t in) {
  const int64_t s = a.strides[i];
  const int64_t kernel = (a.kernel[i] - 1) * a.dilations[i] + 1;
  int64_t pads = a.pads[i] + a.pads[i + a.kernel.size()];
  if (a.auto_pad == "VALID") pads = 0;
  if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
    const int64_t residual = s > 1 ? in % s : 0;
    pads = std::max<int64_t>(residual == 0 ? kernel - s : kernel - residual, 0);
  }
  const int64_t num = in + pads - kernel;
  if (num < 0) return std::nullopt;
  return (num + (a.ceil_mode ? s - 1 : 0)) / s + 1;
}

}  // namespace

Axis ResolveAxis(const PoolAttrs& a, size_t i, int64_t in) {
  Axis ax;
  ax.in = in;
  ax.kernel = a.kernel[i];
  ax.stride = a.strides[i];
  ax.dilation = a.dilations[i];
  ax.pad_begin = a.pads[i];
  ax.pad_end = a.pads[i + a.kernel.size()];
  if (a.auto_pad == "VALID") {
    ax.pad_begin = ax.pad_end = 0;
  } else if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
    const int64_t target = (ax.in + ax.stride - 1) / ax.stride;
    const int64_t needed = (target - 1) * ax.stride + ax.kernel - ax.in;
    ax.pad_begin = a.auto_pad == "SAME_LOWER" ? (needed + 1) / 2 : needed / 2;
    ax.pad_end = needed - ax.pad_begin;
  }
  ax.out = KernelOutputSize(ax, a.ceil_mode);
  return ax;
}

std::optional<std::string> ShapeReason(const NodeView& v, const PoolAttrs& a) {
  const auto shape = v.input_shape(0);
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  for (size_t i = 0; i < a.kernel.size(); ++i) {
    const int64_t in = shape && shape->size() == a.kernel.size() + 2 ? (*shape)[i + 2] : -1;
    if (in < 0) {
      // Symbolic: nothing is declared for this output dim, but SAME_* pads may turn negative.
      if (same && a.kernel[i] < a.strides[i])
        return kNegativePadsReason + std::string(" (input size unknown)");
      continue;
    }
    const Axis ax = ResolveAxis(a, i, in);
    if (ax.pad_begin < 0 || ax.pad_end < 0) return kNegativePadsReason;
    const std::optional<int64_t> inferred = InferredOutputSize(a, i, in);
    if (!inferred)
      return "the dilated kernel is larger than the padded input along spatial dim " + std::to_string(i);
    const int64_t out = ax.out;
    if (out != *inferred)
      return "ORT's kernel gives " + std::to_string(out) + " outputs along spatial dim " + std::to_string(i) +
             " where its shape inference declares " + std::to_string(*inferred);
  }
  return std::nullopt;
}

std::vector<Axis> ResolveAxes(const OpContext& c, const PoolAttrs& a, const mx::Shape& x) {
  const size_t nd = a.kernel.size();
  if (x.size() != nd + 2)
    c.Fail("kernel_shape has " + std::to_string(nd) + " dims for an input of rank " +
           std::to_string(x.size()));
  std::vector<Axis> axes;
  for (size_t i = 0; i < nd; ++i) {
    axes.push_back(ResolveAxis(a, i, x[i + 2]));
    if (axes.back().pad_begin < 0 || axes.back().pad_end < 0) c.Fail(kNegativePadsReason);
    const int64_t out = axes.back().out;
    if (out < 0 || out > std::numeric_limits<int32_t>::max())
      c.Fail("output size " + std::to_string(out) + " along spatial dim " + std::to_string(i));
  }
  return axes;
}

}  // namespace pool
}  // namespace mlx_ep
