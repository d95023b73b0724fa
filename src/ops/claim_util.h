// Small helpers shared by the op families' claims.
#pragma once

#include <initializer_list>
#include <string>

#include "ops/op.h"

namespace mlx_ep {

/** Floating types: float, float16, bfloat16 and (CPU only, see DeviceSupports) double. */
inline constexpr std::initializer_list<ElemType> kFloatTypes = {ElemType::kFloat, ElemType::kFloat16,
                                                                ElemType::kBFloat16, ElemType::kDouble};

/** True when `t` is one of `allowed`. */
inline bool IsOneOf(ElemType t, std::initializer_list<ElemType> allowed) {
  for (ElemType a : allowed)
    if (a == t) return true;
  return false;
}

/** True for float/int types (not bool). */
inline bool IsNumeric(ElemType t) { return IsFloating(t) || IsInteger(t); }

/** "input 0 has type T, which Op does not take here" style reason. */
inline std::string TypeReason(const NodeView& v, size_t input, const std::string& what = "") {
  return "input " + std::to_string(input) + " has type " + ElemName(v.input_type(input)) +
         (what.empty() ? "" : " (" + what + ")");
}

}  // namespace mlx_ep
