// Op family: tensor assembly and selection. Concat, Split, Slice, Gather, Identity here;
// Constant, ConstantOfShape, Range, Cast, CastLike in tensor_const.cc. All of them move data
// (no arithmetic), so every type MLX holds is exact; index/shape inputs other than Gather's
// indices are read on the host, exactly as ORT's CPU kernels interpret them.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/claim_util.h"
#include "ops/indexing_internal.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"
#include "ops/tensor_internal.h"

namespace mlx_ep {
namespace {

using shape_util::Dims;
using shape_util::NormAxis;

Claim ClaimAny(const NodeView&) { return Claim::Yes(); }

// ---------------------------------------------------------------------------------------------
// Identity

std::vector<mx::array> TranslateIdentity(const OpContext& c) { return {c.input(0)}; }

// ---------------------------------------------------------------------------------------------
// Concat

Claim ClaimConcat(const NodeView& v) {
  if (v.num_inputs() == 0) return Claim::No("no inputs");
  if (!v.node().Attr("axis")) return Claim::No("attribute axis is missing");
  for (size_t i = 0; i < v.num_inputs(); ++i)
    if (!v.has_input(i)) return Claim::No("input " + std::to_string(i) + " is absent");
  return Claim::Yes();
}

// ORT's kernel takes the first non-empty input as the reference and skips empty inputs, whatever
// their shape (a [0] next to [2, 3] inputs, say); when all are empty, input 0 is the reference.
std::vector<mx::array> TranslateConcat(const OpContext& c) {
  size_t ref = 0;
  while (ref < c.num_inputs() && c.input(ref).size() == 0) ++ref;
  const bool any_data = ref < c.num_inputs();
  const mx::array& first = c.input(any_data ? ref : 0);
  const int64_t rank = first.ndim();
  if (rank == 0) c.Fail("cannot concatenate scalars");
  const int64_t axis_attr = c.node.AttrInt("axis", 0);
  if (c.node.since_version < 11 && axis_attr < 0) c.Fail("negative axis needs opset 11");
  const int axis = NormAxis(c, axis_attr, rank);
  std::vector<mx::array> parts;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const mx::array& a = c.input(i);
    if (any_data && a.size() == 0) continue;
    if (static_cast<int64_t>(a.ndim()) != rank) c.Fail("inputs have different ranks");
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && a.shape(d) != first.shape(d))
        c.Fail("non-concatenated dimension " + std::to_string(d) + " differs between inputs");
    parts.push_back(a);
  }
  if (parts.size() == 1) return {parts[0]};
  return {mx::concatenate(std::move(parts), axis, c.stream)};
}

// ---------------------------------------------------------------------------------------------
// Split

Claim ClaimSplit(const NodeView& v) {
  const int ver = v.node().since_version;
  if (ver >= 18 && v.node().Attr("num_outputs") && v.has_input(1))
    return Claim::No("both num_outputs and split are given");
  if (ver >= 13 && v.has_input(1)) return Claim::Yes({1});
  return Claim::Yes();
}

std::vector<mx::array> TranslateSplit(const OpContext& c) {
  const mx::array& x = c.input(0);
  const std::vector<int64_t> dims = Dims(x);
  const int axis = NormAxis(c, c.node.AttrInt("axis", 0), dims.size());
  const int64_t dim = dims[axis];
  const int64_t outputs = c.num_outputs();
  const int ver = c.node.since_version;

  std::vector<int64_t> sizes;
  bool given = false;
  if (ver >= 13) {
    if (c.has_input(1)) {
      sizes = c.host_ints(1);
      given = !sizes.empty();  // like ORT, an empty split is an equal split
    }
  } else if (auto s = c.node.AttrInts("split")) {
    sizes = *s;
    given = !sizes.empty();
  }
  if (given) {
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) c.Fail("split sizes must not be negative");
      sum += s;
    }
    if (static_cast<int64_t>(sizes.size()) != outputs || sum != dim)
      c.Fail("split sizes do not match the outputs or the split dimension");
  } else if (ver >= 18 && c.node.Attr("num_outputs")) {
    const int64_t n = c.node.AttrInt("num_outputs", 0);
    if (n < 1 || n != outputs) c.Fail("num_outputs does not match the node's outputs");
    if (n > dim) c.Fail("num_outputs is larger than the split dimension");
    const int64_t chunk = (dim + n - 1) / n;
    sizes.assign(n, chunk);
    sizes.back() = dim - chunk * (n - 1);
    // ORT refuses a last chunk that would be empty (e.g. 6 into 4 chunks of 2).
    if (sizes.back() <= 0) c.Fail("the split dimension cannot be split into num_outputs chunks");
  } else {
    if (outputs < 1 || dim % outputs != 0) c.Fail("the input cannot be split evenly");
    sizes.assign(outputs, dim / outputs);
  }

  std::vector<mx::array> outs;
  mx::Shape start(dims.size(), 0), stop(dims.begin(), dims.end());
  int64_t offset = 0;
  for (int64_t s : sizes) {
    start[axis] = static_cast<int32_t>(offset);
    stop[axis] = static_cast<int32_t>(offset + s);
    outs.push_back(mx::slice(x, start, stop, c.stream));
    offset += s;
  }
  return outs;
}

// ---------------------------------------------------------------------------------------------
// Slice

// ORT's SliceOp::PrepareForCompute (V1-9 without steps, V10+ with steps), then an MLX slice
// that selects exactly those elements.
mx::array SliceImpl(const OpContext& c, const mx::array& x, const std::vector<int64_t>& starts,
                    const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                    const std::vector<int64_t>& steps, bool with_steps) {
  const std::vector<int64_t> dims = Dims(x);
  const int64_t rank = dims.size();
  if (starts.size() != ends.size()) c.Fail("starts and ends have different lengths");
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  } else if (axes.size() != starts.size()) {
    c.Fail("axes and starts have different lengths");
  }
  if (!steps.empty() && steps.size() != starts.size()) c.Fail("steps and starts have different lengths");

  mx::Shape start(rank, 0), stop(dims.begin(), dims.end()), stride(rank, 1);
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int axis = NormAxis(c, axes[i], rank);
    if (seen[axis]) c.Fail("axes has duplicates");
    seen[axis] = true;
    const int64_t dim = dims[axis];
    const int64_t step = i < steps.size() ? steps[i] : 1;
    if (step == 0) c.Fail("step cannot be 0");

    int64_t s = starts[i];
    if (s < 0) s += dim;
    int64_t e = ends[i];
    int64_t count;
    if (!with_steps) {
      s = std::clamp<int64_t>(s, 0, dim);
      if (e < 0) e += dim;
      count = std::max<int64_t>(0, std::clamp<int64_t>(e, 0, dim) - s);
    } else {
      // std::clamp needs lo <= hi; ORT's clamp for step < 0 on an empty axis gives -1.
      auto clamp = [](int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); };
      s = step < 0 ? clamp(s, 0, dim - 1) : clamp(s, 0, dim);
      if (e == std::numeric_limits<int32_t>::max() || e == std::numeric_limits<int64_t>::max()) {
        e = step < 0 ? -1 : dim;  // ORT: INT_MAX means "to the end" in the step's direction
      } else {
        if (e < 0) e += dim;
        e = step < 0 ? clamp(e, -1, dim) : clamp(e, 0, dim);
      }
      count = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(1.0 * (e - s) / step)));
    }

    if (count == 0) {
      start[axis] = 0;
      stop[axis] = 0;
      stride[axis] = 1;
    } else if (step > 0) {
      start[axis] = static_cast<int32_t>(s);
      stop[axis] = static_cast<int32_t>(s + (count - 1) * step + 1);
      stride[axis] = static_cast<int32_t>(count == 1 ? 1 : step);
    } else {
      // MLX reads a negative stop as counting from the end; -dim-1 means "before index 0".
      const int64_t last = s + (count - 1) * step;
      start[axis] = static_cast<int32_t>(s);
      stop[axis] = static_cast<int32_t>(last >= 1 ? last - 1 : -dim - 1);
      stride[axis] = static_cast<int32_t>(count == 1 ? -1 : step);
    }
  }
  return mx::slice(x, start, stop, stride, c.stream);
}

Claim ClaimSlice1(const NodeView& v) {
  if (!v.node().AttrInts("starts") || !v.node().AttrInts("ends"))
    return Claim::No("attributes starts/ends are missing");
  return Claim::Yes();
}

std::vector<mx::array> TranslateSlice1(const OpContext& c) {
  return {SliceImpl(c, c.input(0), *c.node.AttrInts("starts"), *c.node.AttrInts("ends"),
                    c.node.AttrInts("axes").value_or(std::vector<int64_t>{}), {}, false)};
}

Claim ClaimSlice10(const NodeView& v) {
  if (!v.has_input(1) || !v.has_input(2)) return Claim::No("inputs starts/ends are missing");
  // ORT's kernel reads an end of INT_MAX with a negative step as "through index 0", while ONNX
  // shape inference (which fixes the output's static shape when ends and steps are constants)
  // clamps it to dim-1: the two disagree, so leave that node to ORT's kernel.
  if (const Tensor* ends = v.constant_input(2)) {
    const Tensor* steps = v.has_input(4) ? v.constant_input(4) : nullptr;
    if (steps) {
      const std::vector<int64_t> e = ends->ToInt64(), s = steps->ToInt64();
      for (size_t i = 0; i < e.size() && i < s.size(); ++i)
        if (s[i] < 0 &&
            (e[i] == std::numeric_limits<int32_t>::max() || e[i] == std::numeric_limits<int64_t>::max()))
          return Claim::No(
              "constant end INT_MAX with a negative step (ORT's kernel and shape inference disagree)");
    }
  }
  std::vector<size_t> host = {1, 2};
  if (v.has_input(3)) host.push_back(3);
  if (v.has_input(4)) host.push_back(4);
  return Claim::Yes(host);
}

std::vector<mx::array> TranslateSlice10(const OpContext& c) {
  std::vector<int64_t> axes, steps;
  const size_t n = c.host(1).NumElements();
  // Given axes/steps must match starts, empty ones too (SliceImpl reads empty as "absent").
  if (c.has_input(3) && (axes = c.host_ints(3)).size() != n) c.Fail("Starts and axes shape mismatch");
  if (c.has_input(4) && (steps = c.host_ints(4)).size() != n) c.Fail("Starts and steps shape mismatch");
  return {SliceImpl(c, c.input(0), c.host_ints(1), c.host_ints(2), axes, steps, true)};
}

// ---------------------------------------------------------------------------------------------
// Gather

Claim ClaimGather(const NodeView& v) {
  if (!IsOneOf(v.input_type(1), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 1, "indices must be int32 or int64"));
  return Claim::Yes();
}

// ONNX indices lie in [-n, n-1]; negative ones count from the end. ORT's CPU kernel errors on
// indices outside that range; a compiled MLX graph cannot raise on data, so out-of-range
// indices are clamped into [0, n-1] (never read out of bounds) and a runtime check fails the run
// after evaluation, as ORT does.
std::vector<mx::array> TranslateGather(const OpContext& c) {
  const mx::array& x = c.input(0);
  const int axis = NormAxis(c, c.node.AttrInt("axis", 0), x.ndim());
  const int32_t n = x.shape(axis);
  mx::array idx = c.input(1);
  if (idx.size() > 0) {
    const mx::array size(n, idx.dtype());
    indexing::RequireInBounds(c, idx, n);
  }
  if (n > 0 && idx.size() > 0) {
    const mx::array size(n, idx.dtype());
    idx = mx::where(mx::less(idx, mx::array(0, idx.dtype()), c.stream), mx::add(idx, size, c.stream), idx,
                    c.stream);
    idx = mx::clip(idx, mx::array(0, idx.dtype()), mx::array(n - 1, idx.dtype()), c.stream);
  }
  return {mx::take(x, idx, axis, c.stream)};
}

}  // namespace

void RegisterTensorOps(OpRegistry& r) {
  r.Add({"", "Identity", 1, 25, ClaimAny, TranslateIdentity, HostEval::kFromValues});
  r.Add({"", "Concat", 4, 25, ClaimConcat, TranslateConcat, HostEval::kFromValues});
  r.Add({"", "Split", 2, 25, ClaimSplit, TranslateSplit, HostEval::kFromValues});
  r.Add({"", "Slice", 1, 9, ClaimSlice1, TranslateSlice1, HostEval::kFromValues});
  r.Add({"", "Slice", 10, 25, ClaimSlice10, TranslateSlice10, HostEval::kFromValues});
  r.Add({"", "Gather", 1, 25, ClaimGather, TranslateGather, HostEval::kFromValues});
  RegisterTensorValueOps(r);
  RegisterGatherElementsOps(r);
  RegisterTensorScatterOps(r);
}

}  // namespace mlx_ep
