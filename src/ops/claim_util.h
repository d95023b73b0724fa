// Small helpers shared by the op families' claims.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "ops/op.h"

namespace mlx_ep {

/** Claim::No naming the node's first attribute (by name) that is not in `known`, nullopt when
 *  all are: an op declines attributes it does not implement rather than ignore them. */
inline std::optional<Claim> DeclineUnknownAttributes(const Node& n, std::initializer_list<std::string_view> known) {
  for (const auto& [name, attr] : n.attributes)
    if (std::find(known.begin(), known.end(), name) == known.end())
      return Claim::No("attribute " + name + " not supported");
  return std::nullopt;
}

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
