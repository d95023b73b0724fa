// Op family: comparisons (Equal Less LessOrEqual Greater GreaterOrEqual), boolean logic (And Or
// Xor Not), Where, IsNaN and IsInf, bitwise logic (BitwiseAnd BitwiseOr BitwiseXor BitwiseNot), all
// with ONNX (numpy) broadcasting.
//
// ORT semantics mirrored here (checked against ORT's CPU EP):
//  - comparisons are IEEE ones: NaN compares unequal/unordered to everything, -0 == +0; float16
//    and bfloat16 compare exactly in their own type.
//  - IsInf honours detect_negative / detect_positive (both default 1; both 0 gives all false).
//  - Bitwise* (18) take the eight integer types, both inputs of one type (the result's); they are
//    exact in every type, so they fold at trace time like the comparisons.
//  - opset-1 comparisons and And/Or/Xor (legacy `broadcast`/`axis` attributes) are not
//    registered: ORT's CPU EP does not run them either.
#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

constexpr std::initializer_list<ElemType> kComparableTypes = {
    ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16, ElemType::kDouble,
    ElemType::kInt8,  ElemType::kInt16,   ElemType::kInt32,    ElemType::kInt64,
    ElemType::kUInt8, ElemType::kUInt16,  ElemType::kUInt32,   ElemType::kUInt64};

/** Two present inputs of the same type, one of `allowed`, and a bool output. */
Claim ClaimBoolBinary(const NodeView& v, std::initializer_list<ElemType> allowed) {
  if (v.num_inputs() != 2 || !v.has_input(0) || !v.has_input(1)) return Claim::No("expects 2 inputs");
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, allowed)) return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t) return Claim::No("inputs have different types");
  if (v.output_type(0) != ElemType::kBool) return Claim::No("output is not bool");
  return Claim::Yes();
}

Claim ClaimCompare(const NodeView& v) { return ClaimBoolBinary(v, kComparableTypes); }

Claim ClaimEqual(const NodeView& v) {
  if (v.input_type(0) == ElemType::kBool) return ClaimBoolBinary(v, {ElemType::kBool});
  return ClaimBoolBinary(v, kComparableTypes);
}

Claim ClaimLogicBinary(const NodeView& v) { return ClaimBoolBinary(v, {ElemType::kBool}); }

Claim ClaimNot(const NodeView& v) {
  if (!v.has_input(0) || v.input_type(0) != ElemType::kBool) return Claim::No(TypeReason(v, 0));
  if (v.output_type(0) != ElemType::kBool) return Claim::No("output is not bool");
  return Claim::Yes();
}

constexpr std::initializer_list<ElemType> kIntegerTypes = {
    ElemType::kInt8,  ElemType::kInt16,  ElemType::kInt32,  ElemType::kInt64,
    ElemType::kUInt8, ElemType::kUInt16, ElemType::kUInt32, ElemType::kUInt64};

Claim ClaimBitwiseBinary(const NodeView& v) {
  if (v.num_inputs() != 2 || !v.has_input(0) || !v.has_input(1)) return Claim::No("expects 2 inputs");
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, kIntegerTypes)) return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t) return Claim::No("inputs have different types");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

Claim ClaimBitwiseNot(const NodeView& v) {
  if (!v.has_input(0) || !IsOneOf(v.input_type(0), kIntegerTypes)) return Claim::No(TypeReason(v, 0));
  if (v.output_type(0) != v.input_type(0)) return Claim::No("output type differs from the input type");
  return Claim::Yes();
}

Claim ClaimWhere(const NodeView& v) {
  if (v.num_inputs() != 3 || !v.has_input(0) || !v.has_input(1) || !v.has_input(2))
    return Claim::No("expects 3 inputs");
  if (v.input_type(0) != ElemType::kBool) return Claim::No(TypeReason(v, 0, "condition must be bool"));
  const ElemType t = v.input_type(1);
  if (!IsNumeric(t) && t != ElemType::kBool) return Claim::No(TypeReason(v, 1));
  if (v.input_type(2) != t) return Claim::No("X and Y have different types");
  if (v.output_type(0) != t) return Claim::No("output type differs from X");
  return Claim::Yes();
}

Claim ClaimFloatPredicate(const NodeView& v) {
  if (!v.has_input(0) || !IsOneOf(v.input_type(0), kFloatTypes)) return Claim::No(TypeReason(v, 0));
  if (v.output_type(0) != ElemType::kBool) return Claim::No("output is not bool");
  return Claim::Yes();
}

Claim ClaimIsInf(const NodeView& v) {
  for (const char* name : {"detect_negative", "detect_positive"}) {
    const int64_t a = v.node().AttrInt(name, 1);
    if (a != 0 && a != 1)
      return Claim::No(std::string("attribute ") + name + "=" + std::to_string(a) + " not supported");
  }
  return ClaimFloatPredicate(v);
}

#define MLX_EP_BINARY(Name, fn)                                \
  std::vector<mx::array> Translate##Name(const OpContext& c) { \
    return {mx::fn(c.input(0), c.input(1), c.stream)};         \
  }
MLX_EP_BINARY(Equal, equal)
MLX_EP_BINARY(Less, less)
MLX_EP_BINARY(LessOrEqual, less_equal)
MLX_EP_BINARY(Greater, greater)
MLX_EP_BINARY(GreaterOrEqual, greater_equal)
MLX_EP_BINARY(And, logical_and)
MLX_EP_BINARY(Or, logical_or)
MLX_EP_BINARY(Xor, not_equal)
MLX_EP_BINARY(BitwiseAnd, bitwise_and)
MLX_EP_BINARY(BitwiseOr, bitwise_or)
MLX_EP_BINARY(BitwiseXor, bitwise_xor)
#undef MLX_EP_BINARY

std::vector<mx::array> TranslateNot(const OpContext& c) { return {mx::logical_not(c.input(0), c.stream)}; }

std::vector<mx::array> TranslateBitwiseNot(const OpContext& c) {
  return {mx::bitwise_invert(c.input(0), c.stream)};
}

std::vector<mx::array> TranslateWhere(const OpContext& c) {
  return {mx::where(c.input(0), c.input(1), c.input(2), c.stream)};
}

std::vector<mx::array> TranslateIsNaN(const OpContext& c) { return {mx::isnan(c.input(0), c.stream)}; }

std::vector<mx::array> TranslateIsInf(const OpContext& c) {
  const bool neg = c.node.AttrInt("detect_negative", 1) != 0;
  const bool pos = c.node.AttrInt("detect_positive", 1) != 0;
  const mx::array& x = c.input(0);
  if (neg && pos) return {mx::isinf(x, c.stream)};
  if (pos) return {mx::isposinf(x, c.stream)};
  if (neg) return {mx::isneginf(x, c.stream)};
  return {mx::zeros_like(x, mx::bool_, c.stream)};
}

}  // namespace

void RegisterLogicalOps(OpRegistry& r) {
  r.Add({"", "Equal", 7, 19, ClaimEqual, TranslateEqual, HostEval::kFromValues});
  r.Add({"", "Less", 7, 13, ClaimCompare, TranslateLess, HostEval::kFromValues});
  r.Add({"", "LessOrEqual", 12, 16, ClaimCompare, TranslateLessOrEqual, HostEval::kFromValues});
  r.Add({"", "Greater", 7, 13, ClaimCompare, TranslateGreater, HostEval::kFromValues});
  r.Add({"", "GreaterOrEqual", 12, 16, ClaimCompare, TranslateGreaterOrEqual, HostEval::kFromValues});
  r.Add({"", "And", 7, 7, ClaimLogicBinary, TranslateAnd, HostEval::kFromValues});
  r.Add({"", "Or", 7, 7, ClaimLogicBinary, TranslateOr, HostEval::kFromValues});
  r.Add({"", "Xor", 7, 7, ClaimLogicBinary, TranslateXor, HostEval::kFromValues});
  r.Add({"", "Not", 1, 1, ClaimNot, TranslateNot, HostEval::kFromValues});
  r.Add({"", "BitwiseAnd", 18, 18, ClaimBitwiseBinary, TranslateBitwiseAnd, HostEval::kFromValues});
  r.Add({"", "BitwiseOr", 18, 18, ClaimBitwiseBinary, TranslateBitwiseOr, HostEval::kFromValues});
  r.Add({"", "BitwiseXor", 18, 18, ClaimBitwiseBinary, TranslateBitwiseXor, HostEval::kFromValues});
  r.Add({"", "BitwiseNot", 18, 18, ClaimBitwiseNot, TranslateBitwiseNot, HostEval::kFromValues});
  r.Add({"", "Where", 9, 16, ClaimWhere, TranslateWhere, HostEval::kFromValues});
  r.Add({"", "IsNaN", 9, 20, ClaimFloatPredicate, TranslateIsNaN});
  r.Add({"", "IsInf", 10, 20, ClaimIsInf, TranslateIsInf});
}

}  // namespace mlx_ep
