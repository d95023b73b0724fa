// Op family: shape manipulation. Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Expand,
// Shape, Size, Tile. Every one of them is a pure data movement (or, for Shape/Size, a value
// computed from the traced input's shape), so any type MLX can hold is exact; shapes, axes and
// repeats given as inputs are read on the host (the compiled graph is specialised on them).
#include <algorithm>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

using shape_util::Dims;
using shape_util::Int64Vector;
using shape_util::NormAxis;
using shape_util::Product;
using shape_util::ToShape;

// ---------------------------------------------------------------------------------------------
// Reshape

// ONNX Reshape semantics: 0 copies the input dim (unless allowzero), one -1 is inferred.
mx::array ReshapeTo(const OpContext& c, const mx::array& x, std::vector<int64_t> req, bool allowzero) {
  const std::vector<int64_t> in = Dims(x);
  const int64_t total = Product(in, 0, in.size());
  int64_t unknown = -1, size = 1;
  for (size_t i = 0; i < req.size(); ++i) {
    if (req[i] < -1) c.Fail("requested dimension " + std::to_string(req[i]) + " is below -1");
    if (req[i] == -1) {
      if (unknown >= 0) c.Fail("at most one dimension of the requested shape can be -1");
      unknown = static_cast<int64_t>(i);
      continue;
    }
    if (req[i] == 0 && !allowzero) {
      if (i >= in.size()) c.Fail("a 0 in the requested shape is beyond the input's rank");
      req[i] = in[i];
    }
    size *= req[i];
  }
  if (unknown >= 0) {
    if (size == 0 || total % size != 0) c.Fail("the input cannot be reshaped to the requested shape");
    req[unknown] = total / size;
  } else if (size != total) {
    c.Fail("the input cannot be reshaped to the requested shape");
  }
  return mx::reshape(x, ToShape(c, req), c.stream);
}

Claim ClaimReshape1(const NodeView& v) {
  if (!v.node().AttrInts("shape")) return Claim::No("attribute shape is missing");
  return Claim::Yes();
}

std::vector<mx::array> TranslateReshape1(const OpContext& c) {
  return {ReshapeTo(c, c.input(0), *c.node.AttrInts("shape"), false)};
}

Claim ClaimReshape(const NodeView& v) {
  if (!v.has_input(1)) return Claim::No("input shape is missing");
  return Claim::Yes({1});
}

std::vector<mx::array> TranslateReshape(const OpContext& c) {
  // ORT's kernel reads allowzero == 1 only; any other value means 0 (copy the input dim).
  const bool allowzero = c.node.since_version >= 14 && c.node.AttrInt("allowzero", 0) == 1;
  return {ReshapeTo(c, c.input(0), c.host_ints(1), allowzero)};
}

// ---------------------------------------------------------------------------------------------
// Transpose

Claim ClaimAny(const NodeView&) { return Claim::Yes(); }

std::vector<mx::array> TranslateTranspose(const OpContext& c) {
  const mx::array& x = c.input(0);
  const int64_t rank = x.ndim();
  std::vector<int> axes;
  if (auto perm = c.node.AttrInts("perm")) {
    if (static_cast<int64_t>(perm->size()) != rank)
      c.Fail("perm has " + std::to_string(perm->size()) + " entries for an input of rank " +
             std::to_string(rank));
    std::vector<bool> seen(rank, false);
    for (int64_t p : *perm) {
      const int a = NormAxis(c, p, rank);
      if (seen[a]) c.Fail("perm repeats axis " + std::to_string(p));
      seen[a] = true;
      axes.push_back(a);
    }
  } else {
    for (int64_t i = rank - 1; i >= 0; --i) axes.push_back(static_cast<int>(i));
  }
  return {mx::transpose(x, axes, c.stream)};
}

// ---------------------------------------------------------------------------------------------
// Squeeze / Unsqueeze

mx::array SqueezeAxes(const OpContext& c, const mx::array& x,
                      const std::optional<std::vector<int64_t>>& axes) {
  const std::vector<int64_t> in = Dims(x);
  const int64_t rank = in.size();
  std::vector<bool> drop(rank, false);
  if (axes && !axes->empty()) {  // like ORT, empty axes squeeze every dimension of size 1
    for (int64_t a : *axes) {
      const int n = NormAxis(c, a, rank);
      if (in[n] != 1)
        c.Fail("cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(in[n]));
      drop[n] = true;
    }
  } else {
    for (int64_t i = 0; i < rank; ++i) drop[i] = in[i] == 1;
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i)
    if (!drop[i]) out.push_back(in[i]);
  return mx::reshape(x, ToShape(c, out), c.stream);
}

Claim ClaimSqueezeAttr(const NodeView& v) {
  if (auto axes = v.node().AttrInts("axes"); axes && axes->empty())
    return Claim::No("empty axes attribute (ORT's kernel and shape inference disagree)");
  return Claim::Yes();
}

std::vector<mx::array> TranslateSqueezeAttr(const OpContext& c) {
  return {SqueezeAxes(c, c.input(0), c.node.AttrInts("axes"))};
}

Claim ClaimSqueeze13(const NodeView& v) {
  // ORT's kernel squeezes every 1 for an empty axes tensor; ONNX shape inference (the static
  // output shape, when axes is a constant) squeezes nothing. Leave that one to ORT's kernel.
  if (const Tensor* axes = v.constant_input(1); axes && axes->NumElements() == 0)
    return Claim::No("constant empty axes (ORT's kernel and shape inference disagree)");
  if (v.has_input(1)) return Claim::Yes({1});
  return Claim::Yes();
}

std::vector<mx::array> TranslateSqueeze13(const OpContext& c) {
  std::optional<std::vector<int64_t>> axes;
  if (c.has_input(1)) axes = c.host_ints(1);
  return {SqueezeAxes(c, c.input(0), axes)};
}

mx::array UnsqueezeAxes(const OpContext& c, const mx::array& x, const std::vector<int64_t>& axes) {
  const std::vector<int64_t> in = Dims(x);
  const int64_t out_rank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : axes) {
    const int n = NormAxis(c, a, out_rank);
    if (inserted[n]) c.Fail("axes repeat axis " + std::to_string(a));
    inserted[n] = true;
  }
  std::vector<int64_t> out;
  size_t k = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? 1 : in[k++]);
  return mx::reshape(x, ToShape(c, out), c.stream);
}

Claim ClaimUnsqueezeAttr(const NodeView& v) {
  if (!v.node().AttrInts("axes")) return Claim::No("attribute axes is missing");
  return Claim::Yes();
}

std::vector<mx::array> TranslateUnsqueezeAttr(const OpContext& c) {
  return {UnsqueezeAxes(c, c.input(0), *c.node.AttrInts("axes"))};
}

Claim ClaimUnsqueeze13(const NodeView& v) {
  if (!v.has_input(1)) return Claim::No("input axes is missing");
  return Claim::Yes({1});
}

std::vector<mx::array> TranslateUnsqueeze13(const OpContext& c) {
  return {UnsqueezeAxes(c, c.input(0), c.host_ints(1))};
}

// ---------------------------------------------------------------------------------------------
// Flatten

std::vector<mx::array> TranslateFlatten(const OpContext& c) {
  const mx::array& x = c.input(0);
  const std::vector<int64_t> in = Dims(x);
  const int64_t rank = in.size();
  const int64_t axis_attr = c.node.AttrInt("axis", 1);
  if (c.node.since_version < 11 && axis_attr < 0) c.Fail("negative axis needs opset 11");
  const int axis = NormAxis(c, axis_attr, rank, /*inclusive_end=*/true);
  return {mx::reshape(x, ToShape(c, {Product(in, 0, axis), Product(in, axis, in.size())}), c.stream)};
}

// ---------------------------------------------------------------------------------------------
// Expand

Claim ClaimExpand(const NodeView& v) {
  if (!v.has_input(1)) return Claim::No("input shape is missing");
  return Claim::Yes({1});
}

std::vector<mx::array> TranslateExpand(const OpContext& c) {
  const mx::array& x = c.input(0);
  const std::vector<int64_t> in = Dims(x);
  const std::vector<int64_t> shape = c.host_ints(1);
  const size_t rank = std::max(in.size(), shape.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t a = i + in.size() >= rank ? in[i + in.size() - rank] : 1;
    const int64_t b = i + shape.size() >= rank ? shape[i + shape.size() - rank] : 1;
    if (b < 0) c.Fail("shape has a negative dimension");
    if (a == b || b == 1) {
      out[i] = a;
    } else if (a == 1) {
      out[i] = b;
    } else {
      c.Fail("input dimension " + std::to_string(a) + " cannot be broadcast to " + std::to_string(b));
    }
  }
  return {mx::broadcast_to(x, ToShape(c, out), c.stream)};
}

// ---------------------------------------------------------------------------------------------
// Shape / Size

std::vector<mx::array> TranslateShape(const OpContext& c) {
  const std::vector<int64_t> in = Dims(c.input(0));
  const int64_t rank = in.size();
  int64_t start = 0, end = rank;
  if (c.node.since_version >= 15) {
    auto clamp = [rank](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
    start = clamp(c.node.AttrInt("start", 0));
    if (const Attribute* e = c.node.Attr("end"); e && e->kind == Attribute::Kind::kInt) end = clamp(e->i);
  }
  // Dynamic dims (a compiled function serving several input shapes): the dims are data.
  if (const auto& dims = c.runtime_shape(0))
    return {mx::slice(*dims, {static_cast<int>(start)}, {static_cast<int>(std::max(start, end))}, c.stream)};
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(in[i]);
  return {Int64Vector(dims)};
}

std::vector<mx::array> TranslateSize(const OpContext& c) {
  if (const auto& dims = c.runtime_shape(0)) return {mx::prod(*dims, false, c.stream)};
  const std::vector<int64_t> in = Dims(c.input(0));
  return {mx::array(static_cast<int64_t>(Product(in, 0, in.size())), mx::int64)};
}

// ---------------------------------------------------------------------------------------------
// Tile

Claim ClaimTile(const NodeView& v) {
  if (!v.has_input(1)) return Claim::No("input repeats is missing");
  return Claim::Yes({1});
}

std::vector<mx::array> TranslateTile(const OpContext& c) {
  const mx::array& x = c.input(0);
  const std::vector<int64_t> reps = c.host_ints(1);
  if (reps.size() != x.ndim())
    c.Fail("repeats has " + std::to_string(reps.size()) + " entries for an input of rank " +
           std::to_string(x.ndim()));
  std::vector<int64_t> out = Dims(x);
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) c.Fail("repeats must not be negative");
    out[i] *= reps[i];
  }
  ToShape(c, out);  // fails for sizes MLX cannot index
  if (x.ndim() == 0) return {x};
  return {mx::tile(x, std::vector<int>(reps.begin(), reps.end()), c.stream)};
}

}  // namespace

void RegisterShapeOps(OpRegistry& r) {
  r.Add({"", "Reshape", 1, 4, ClaimReshape1, TranslateReshape1, HostEval::kFromValues});
  r.Add({"", "Reshape", 5, 25, ClaimReshape, TranslateReshape, HostEval::kFromValues});
  r.Add({"", "Transpose", 1, 25, ClaimAny, TranslateTranspose, HostEval::kFromValues});
  r.Add({"", "Squeeze", 1, 12, ClaimSqueezeAttr, TranslateSqueezeAttr, HostEval::kFromValues});
  r.Add({"", "Squeeze", 13, 25, ClaimSqueeze13, TranslateSqueeze13, HostEval::kFromValues});
  r.Add({"", "Unsqueeze", 1, 12, ClaimUnsqueezeAttr, TranslateUnsqueezeAttr, HostEval::kFromValues});
  r.Add({"", "Unsqueeze", 13, 25, ClaimUnsqueeze13, TranslateUnsqueeze13, HostEval::kFromValues});
  r.Add({"", "Flatten", 1, 25, ClaimAny, TranslateFlatten, HostEval::kFromValues});
  r.Add({"", "Expand", 8, 25, ClaimExpand, TranslateExpand, HostEval::kFromValues});
  r.Add({"", "Shape", 1, 25, ClaimAny, TranslateShape, HostEval::kFromShapes});
  r.Add({"", "Size", 1, 25, ClaimAny, TranslateSize, HostEval::kFromShapes});
  r.Add({"", "Tile", 6, 25, ClaimTile, TranslateTile, HostEval::kFromValues});
}

}  // namespace mlx_ep
