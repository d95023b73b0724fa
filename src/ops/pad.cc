// Op family: Pad (opsets 2-10 with attributes; 11-12, 13-17, 18 and 19+ with pads/constant_value/axes
// inputs). It only moves data, so every type MLX holds is exact. Semantics follow ORT's CPU kernel:
//  - negative pads crop first; the other modes then pad the cropped tensor (edge repeats its border,
//    reflect mirrors it without repeating the border, wrap repeats it periodically);
//  - reflect needs an axis of at least 2 elements and pads no larger than that axis minus 1;
//  - edge/reflect/wrap cannot pad an axis that is empty (after cropping); ORT fails there, so does this.
//  - wrap is ONNX's from opset 19, but ORT's kernel takes it at every opset, and so does this.
#include <algorithm>
#include <limits>
#include <string>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

using shape_util::Dims;
using shape_util::NormAxis;

enum class PadMode { kConstant, kEdge, kReflect, kWrap };

bool ParseMode(const std::string& s, PadMode& mode) {
  if (s == "constant")
    mode = PadMode::kConstant;
  else if (s == "edge")
    mode = PadMode::kEdge;
  else if (s == "reflect")
    mode = PadMode::kReflect;
  else if (s == "wrap")
    mode = PadMode::kWrap;
  else
    return false;
  return true;
}

Claim ClaimPad(const NodeView& v) {
  const int ver = v.node().since_version;
  PadMode mode;
  const std::string mode_name = v.node().AttrString("mode", "constant");
  if (!ParseMode(mode_name, mode)) return Claim::No("unknown mode '" + mode_name + "'");
  if (ver < 11) {
    if (!v.node().AttrInts("pads")) return Claim::No("attribute pads is missing");
    return Claim::Yes();
  }
  if (!v.has_input(1)) return Claim::No("input pads is missing");
  if (v.input_type(1) != ElemType::kInt64) return Claim::No(TypeReason(v, 1, "pads must be int64"));
  std::vector<size_t> host = {1};
  if (ver >= 18 && v.has_input(3)) {
    if (!IsOneOf(v.input_type(3), {ElemType::kInt32, ElemType::kInt64}))
      return Claim::No(TypeReason(v, 3, "axes must be int32 or int64"));
    host.push_back(3);
  }
  return Claim::Yes(host);
}

/** Per-axis (begin, end) pads of a rank-`rank` input from ONNX's [b0.., e0..] over `axes`. */
void AxisPads(const OpContext& c, const std::vector<int64_t>& pads, const std::vector<int64_t>& axes,
              int64_t rank, std::vector<int64_t>& begin, std::vector<int64_t>& end) {
  const size_t n = axes.size();
  if (pads.size() != 2 * n) c.Fail("pads must hold 2 values per padded axis");
  begin.assign(rank, 0);
  end.assign(rank, 0);
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < n; ++i) {
    const int axis = NormAxis(c, axes[i], rank);
    if (seen[axis]) c.Fail("axes has duplicates");
    seen[axis] = true;
    begin[axis] = pads[i];
    end[axis] = pads[n + i];
  }
}

/** Source index along an axis of `n` elements for output position `j` of a reflect/wrap pad. */
int32_t SourceIndex(PadMode mode, int64_t j, int64_t n) {
  if (mode == PadMode::kWrap) return static_cast<int32_t>(((j % n) + n) % n);
  // reflect (the caller checked that pads are at most n - 1): one mirror on each side
  if (j < 0) return static_cast<int32_t>(-j);
  if (j >= n) return static_cast<int32_t>(2 * (n - 1) - j);
  return static_cast<int32_t>(j);
}

/** Reflect or wrap pad of one axis as a gather of computed source indices. */
mx::array GatherPad(const OpContext& c, const mx::array& x, int axis, int64_t lo, int64_t hi, PadMode mode) {
  const int64_t n = x.shape(axis);
  std::vector<int32_t> idx;
  idx.reserve(n + lo + hi);
  for (int64_t j = -lo; j < n + hi; ++j) idx.push_back(SourceIndex(mode, j, n));
  const mx::array indices(idx.begin(), mx::Shape{static_cast<int32_t>(idx.size())}, mx::int32);
  return mx::take(x, indices, axis, c.stream);
}

/** The constant of constant mode: constant_value (11+) or the value attribute (2-10), else 0. */
mx::array ConstantValue(const OpContext& c, mx::Dtype dtype) {
  if (c.node.since_version < 11)
    return mx::astype(mx::array(c.node.AttrFloat("value", 0.f)), dtype, c.stream);
  if (!c.has_input(2)) return mx::zeros({}, dtype, c.stream);
  const mx::array& v = c.input(2);
  if (v.size() != 1) c.Fail("constant_value must hold exactly one value");
  if (v.dtype() != dtype) c.Fail("constant_value has a different type than data");
  return mx::reshape(v, {}, c.stream);
}

std::vector<mx::array> TranslatePad(const OpContext& c) {
  // ORT checks constant_value in every mode, not only where it is used.
  if (c.has_input(2)) (void)ConstantValue(c, c.input(0).dtype());
  const mx::array& x = c.input(0);
  const std::vector<int64_t> dims = Dims(x);
  const int64_t rank = dims.size();
  if (rank == 0) c.Fail("data must have rank >= 1");
  PadMode mode = PadMode::kConstant;
  ParseMode(c.node.AttrString("mode", "constant"), mode);

  std::vector<int64_t> pads, axes;
  if (c.node.since_version < 11) {
    pads = *c.node.AttrInts("pads");
  } else {
    pads = c.host_ints(1);
    if (c.host(1).shape.size() > 2 || (c.host(1).shape.size() == 2 && c.host(1).shape[0] != 1))
      c.Fail("pads must be a 1-D tensor");
    if (c.node.since_version >= 18 && c.has_input(3)) axes = c.host_ints(3);
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  std::vector<int64_t> begin, end;
  AxisPads(c, pads, axes, rank, begin, end);

  // Negative pads crop.
  mx::Shape start(rank, 0), stop(dims.begin(), dims.end()), out_shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    start[d] = static_cast<int32_t>(std::min<int64_t>(dims[d], std::max<int64_t>(0, -begin[d])));
    const int64_t kept = dims[d] + std::min<int64_t>(0, begin[d]) + std::min<int64_t>(0, end[d]);
    if (kept < 0) c.Fail("negative pads remove more than axis " + std::to_string(d) + " holds");
    stop[d] = start[d] + static_cast<int32_t>(kept);
    const int64_t padded = dims[d] + begin[d] + end[d];
    if (std::max(begin[d], end[d]) > std::numeric_limits<int32_t>::max() ||
        padded > std::numeric_limits<int32_t>::max())
      c.Fail("padded axis " + std::to_string(d) + " is too large");
    out_shape[d] = static_cast<int32_t>(padded);
  }
  mx::array y = mx::slice(x, start, stop, c.stream);

  if (mode == PadMode::kWrap && x.size() == 0) c.Fail("wrap mode cannot pad an empty tensor");
  std::vector<int> pad_axes;
  mx::Shape lo, hi;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t b = std::max<int64_t>(0, begin[d]), e = std::max<int64_t>(0, end[d]);
    if (b == 0 && e == 0) continue;
    const int64_t n = y.shape(d);
    if (mode != PadMode::kConstant && n == 0)
      c.Fail("cannot pad axis " + std::to_string(d) + " of zero effective size in this mode");
    if (mode == PadMode::kReflect && (n < 2 || b > n - 1 || e > n - 1))
      c.Fail("reflect pads of axis " + std::to_string(d) + " must be smaller than its size");
    pad_axes.push_back(static_cast<int>(d));
    lo.push_back(static_cast<int32_t>(b));
    hi.push_back(static_cast<int32_t>(e));
  }
  if (pad_axes.empty()) return {y};
  if (y.size() == 0) {
    // Nothing to copy: constant mode fills the padded shape; other modes reach here only when an
    // unpadded axis is empty, so the output is empty too.
    if (mode == PadMode::kConstant)
      return {mx::broadcast_to(ConstantValue(c, x.dtype()), out_shape, c.stream)};
    return {mx::zeros(out_shape, x.dtype(), c.stream)};
  }
  if (mode == PadMode::kConstant)
    return {mx::pad(y, pad_axes, lo, hi, ConstantValue(c, x.dtype()), "constant", c.stream)};
  if (mode == PadMode::kEdge)
    return {mx::pad(y, pad_axes, lo, hi, mx::array(0, x.dtype()), "edge", c.stream)};
  for (size_t i = 0; i < pad_axes.size(); ++i) y = GatherPad(c, y, pad_axes[i], lo[i], hi[i], mode);
  return {y};
}

}  // namespace

void RegisterPadOps(OpRegistry& r) {
  // 2-10 take pads/value as attributes; 11 turns them into inputs; 13 adds bfloat16/bool/string,
  // 18 the axes input, 19 the wrap mode (21+ only add types).
  r.Add({"", "Pad", 2, 10, ClaimPad, TranslatePad});
  r.Add({"", "Pad", 11, 12, ClaimPad, TranslatePad});
  r.Add({"", "Pad", 13, 17, ClaimPad, TranslatePad});
  r.Add({"", "Pad", 18, 18, ClaimPad, TranslatePad});
  r.Add({"", "Pad", 19, 25, ClaimPad, TranslatePad});
}

}  // namespace mlx_ep
