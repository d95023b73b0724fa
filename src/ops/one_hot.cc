// Op family: indexing. OneHot (opsets 9-10 and 11; registered from RegisterIndexingOps).
//
// As ORT's CPU kernel (one kernel for both versions): depth is read on the host and truncated to an
// integer, and must be > 0; negative indices get depth added; an index then equal to none of
// 0..depth-1 (out of range, or a fractional float) gives a row of off values. values = [off, on],
// and the output has their type.
#include <limits>

#include "ops/claim_util.h"
#include "ops/indexing_internal.h"
#include "ops/shape_internal.h"

namespace mlx_ep {
namespace {

Claim ClaimOneHot(const NodeView& v) {
  for (size_t i = 0; i < 3; ++i)
    if (!v.has_input(i)) return Claim::No("input " + std::to_string(i) + " is missing");
  if (!IsNumeric(v.input_type(0))) return Claim::No(TypeReason(v, 0, "indices must be numeric"));
  if (!IsNumeric(v.input_type(1))) return Claim::No(TypeReason(v, 1, "depth must be numeric"));
  if (v.output_type(0) != v.input_type(2)) return Claim::No("output type differs from the type of values");
  return Claim::Yes({1});  // depth sets the output shape
}

/** The type indices are compared in: integers exactly as int64, floats as float32 (float64 for
 *  float64), where 0..depth-1 are exact; ORT compares a float index with the position as a float. */
mx::Dtype CompareType(mx::Dtype t) {
  if (t == mx::float64) return mx::float64;
  return mx::issubdtype(t, mx::floating) ? mx::float32 : mx::int64;
}

std::vector<mx::array> TranslateOneHot(const OpContext& c) {
  const mx::Stream s = c.stream;
  const Tensor& depth_value = c.host(1);
  if (depth_value.NumElements() != 1) c.Fail("depth must hold exactly one value");
  const int64_t depth = c.host_ints(1)[0];
  if (depth <= 0) c.Fail("depth must be > 0");
  if (depth > std::numeric_limits<int32_t>::max()) c.Fail("depth is too large");
  const mx::array& values = c.input(2);
  if (values.ndim() != 1 || values.size() != 2) c.Fail("values must be [off_value, on_value]");

  const mx::array& idx = c.input(0);
  const int out_rank = static_cast<int>(idx.ndim()) + 1;
  const int axis = shape_util::NormAxis(c, c.node.AttrInt("axis", -1), out_rank);
  const mx::Dtype t = CompareType(idx.dtype());
  mx::array i = mx::astype(idx, t, s);
  i = mx::where(mx::less(i, mx::array(0, t), s), mx::add(i, mx::array(static_cast<double>(depth), t), s), i,
                s);

  mx::Shape along(out_rank, 1);
  along[axis] = static_cast<int32_t>(depth);
  const mx::array positions =
      mx::reshape(mx::astype(mx::arange(static_cast<int32_t>(depth), mx::int32, s), t, s), along, s);
  const mx::array hot = mx::equal(mx::expand_dims(i, axis, s), positions, s);
  return {mx::where(hot, mx::take(values, 1, 0, s), mx::take(values, 0, 0, s), s)};
}

}  // namespace

void RegisterOneHotOps(OpRegistry& r) {
  // OneHot-9 and OneHot-11 differ only in documenting negative indices/axis, which ORT's one
  // kernel accepts for both. OneHot-28 (bfloat16 values) is newer than ORT's opsets.
  r.Add({"", "OneHot", 9, 11, ClaimOneHot, TranslateOneHot});
}

}  // namespace mlx_ep
