// Helpers shared by the shape and tensor op families (ops/shape.cc, ops/tensor*.cc).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ops/op.h"

namespace mlx_ep {
namespace shape_util {

/** Normalizes an ONNX axis in [-rank, rank) (or [-rank, rank] with `inclusive_end`); fails
 *  the translation when it is out of range. */
inline int NormAxis(const OpContext& c, int64_t axis, int64_t rank, bool inclusive_end = false) {
  const int64_t hi = inclusive_end ? rank : rank - 1;
  if (axis < -rank || axis > hi)
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

/** Converts ONNX dims to an MLX shape; fails on negative dims or dims MLX cannot index. */
inline mx::Shape ToShape(const OpContext& c, const std::vector<int64_t>& dims) {
  mx::Shape s;
  s.reserve(dims.size());
  for (int64_t d : dims) {
    if (d < 0 || d > std::numeric_limits<int32_t>::max())
      c.Fail("dimension " + std::to_string(d) + " is not supported");
    s.push_back(static_cast<int32_t>(d));
  }
  return s;
}

/** True when `from` broadcasts (numpy rules) to exactly `to`. */
inline bool BroadcastsTo(const mx::Shape& from, const mx::Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

/** The shape of an array as int64 dims. */
inline std::vector<int64_t> Dims(const mx::array& a) { return {a.shape().begin(), a.shape().end()}; }

/** A 1-D int64 array holding `v` (built on the host; a constant of the traced graph). */
inline mx::array Int64Vector(const std::vector<int64_t>& v) {
  return mx::array(v.begin(), mx::Shape{static_cast<int32_t>(v.size())}, mx::int64);
}

/** Product of dims in [begin, end). */
inline int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) p *= dims[i];
  return p;
}

}  // namespace shape_util
}  // namespace mlx_ep
