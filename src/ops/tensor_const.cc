// Op family "tensor", part 2: values made from attributes or host inputs (Constant,
// ConstantOfShape, Range) and type conversions (Cast, CastLike, BitCast).
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/shape_internal.h"
#include "ops/tensor_internal.h"

namespace mlx_ep {
namespace {

using shape_util::ToShape;

// ---------------------------------------------------------------------------------------------
// Constant

Claim ClaimConstant(const NodeView& v) {
  const Node& n = v.node();
  for (const char* unsupported : {"sparse_value", "value_string", "value_strings"})
    if (n.Attr(unsupported)) return Claim::No(std::string("attribute ") + unsupported + " is not supported");
  if (const Attribute* a = n.Attr("value")) {
    if (a->kind != Attribute::Kind::kTensor || !a->tensor)
      return Claim::No("attribute value is not a tensor");
    if (!DeviceSupports(a->tensor->type))
      return Claim::No("value has type " + ElemName(a->tensor->type) + ", which MLX does not support here");
    if (a->tensor->bytes.size() != static_cast<size_t>(a->tensor->NumElements()) * ElemSize(a->tensor->type))
      return Claim::No("value tensor data is not available");
    return Claim::Yes();
  }
  for (const char* name : {"value_float", "value_floats", "value_int", "value_ints"})
    if (n.Attr(name)) return Claim::Yes();
  return Claim::No("no value attribute");
}

std::vector<mx::array> TranslateConstant(const OpContext& c) {
  const Node& n = c.node;
  if (const Attribute* a = n.Attr("value")) return {ToArray(*a->tensor)};
  if (const Attribute* a = n.Attr("value_float")) return {mx::array(a->f, mx::float32)};
  if (const Attribute* a = n.Attr("value_floats"))
    return {mx::array(a->floats.begin(), mx::Shape{static_cast<int32_t>(a->floats.size())}, mx::float32)};
  if (const Attribute* a = n.Attr("value_int")) return {mx::array(static_cast<int64_t>(a->i), mx::int64)};
  if (const Attribute* a = n.Attr("value_ints")) return {shape_util::Int64Vector(a->ints)};
  c.Fail("no value attribute");
}

// ---------------------------------------------------------------------------------------------
// ConstantOfShape

Claim ClaimConstantOfShape(const NodeView& v) {
  if (const Attribute* a = v.node().Attr("value")) {
    if (a->kind != Attribute::Kind::kTensor || !a->tensor)
      return Claim::No("attribute value is not a tensor");
    if (!DeviceSupports(a->tensor->type))
      return Claim::No("value has type " + ElemName(a->tensor->type) + ", which MLX does not support here");
    if (a->tensor->NumElements() != 1 || a->tensor->bytes.size() != ElemSize(a->tensor->type))
      return Claim::No("value must hold exactly one element");
  }
  return Claim::Yes({0});
}

std::vector<mx::array> TranslateConstantOfShape(const OpContext& c) {
  const mx::Shape shape = ToShape(c, c.host_ints(0));
  if (const Attribute* a = c.node.Attr("value")) {
    mx::array value = mx::reshape(ToArray(*a->tensor), {}, c.stream);
    return {mx::full(shape, value, value.dtype(), c.stream)};
  }
  return {mx::full(shape, mx::array(0.0f), mx::float32, c.stream)};
}

// ---------------------------------------------------------------------------------------------
// Range: computed on the host exactly like ORT's kernel (the length from double arithmetic, then
// repeated `start += delta` in T, not start + i * delta), so float outputs match ORT bit for bit.

template <typename T>
T HostScalar(const OpContext& c, size_t i) {
  const Tensor& t = c.host(i);
  if (t.NumElements() != 1 || t.shape.size() > 1 || t.bytes.size() != sizeof(T))
    c.Fail("input " + std::to_string(i) + " must be a scalar");
  T v;
  std::memcpy(&v, t.bytes.data(), sizeof(T));
  return v;
}

template <typename T>
mx::array RangeOf(const OpContext& c, mx::Dtype dtype) {
  T start = HostScalar<T>(c, 0);
  const T limit = HostScalar<T>(c, 1);
  const T delta = c.has_input(2) ? HostScalar<T>(c, 2) : T{1};
  if (delta == T{0}) c.Fail("delta cannot be zero");
  // ORT 1.31 computes the length in double from the converted inputs (verified against it: for
  // float inputs this differs from both (limit - start) in float and the ONNX reference).
  const double count =
      std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
  // ORT 1.31 rejects a NaN or infinite count (NaN start/limit/delta, infinite limit).
  if (!std::isfinite(count)) c.Fail("the computed number of elements is not a finite value");
  // Checked before the conversion: a count beyond int64's range (1e37) makes it undefined
  // (found by the libFuzzer target under UBSan).
  if (count > std::numeric_limits<int32_t>::max()) c.Fail("the output is too large");
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<T> values(n);
  for (int64_t i = 0; i < n; ++i) {
    values[i] = start;
    start += delta;
  }
  return mx::array(values.begin(), mx::Shape{static_cast<int32_t>(n)}, dtype);
}

Claim ClaimRange(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t,
               {ElemType::kFloat, ElemType::kDouble, ElemType::kInt16, ElemType::kInt32, ElemType::kInt64}))
    return Claim::No(TypeReason(v, 0, "ORT's Range takes float, double, int16, int32, int64"));
  for (size_t i = 1; i < 3; ++i)
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No("inputs have different types");
  if (v.has_input(2)) return Claim::Yes({0, 1, 2});
  return Claim::Yes({0, 1});
}

std::vector<mx::array> TranslateRange(const OpContext& c) {
  switch (c.host(0).type) {
    case ElemType::kFloat:
      return {RangeOf<float>(c, mx::float32)};
    case ElemType::kDouble:
      return {RangeOf<double>(c, mx::float64)};
    case ElemType::kInt16:
      return {RangeOf<int16_t>(c, mx::int16)};
    case ElemType::kInt32:
      return {RangeOf<int32_t>(c, mx::int32)};
    case ElemType::kInt64:
      return {RangeOf<int64_t>(c, mx::int64)};
    default:
      c.Fail("unsupported type " + ElemName(c.host(0).type));
  }
}

// ---------------------------------------------------------------------------------------------
// Cast / CastLike
//
// Every pair of bool, integer and floating types MLX holds. Conversions follow C++ semantics like
// ORT's (Eigen) kernel: float -> int truncates toward zero, integers wrap (two's complement),
// x -> bool is x != 0 (NaN -> true), float narrowing rounds to nearest even. Float -> int for NaN,
// infinities and out-of-range values is undefined in ONNX; results there are platform-specific
// (on x86 CPU both give the same "integer indefinite" value for 32/64-bit targets). Types MLX
// lacks (string, float8, int4, ...) are declined by the shared type check; `saturate` only
// concerns float8 targets and so never applies here.

Claim ClaimCast(const NodeView& v) {
  const ElemType in = v.input_type(0), out = v.output_type(0);
  if (!(IsNumeric(in) || in == ElemType::kBool)) return Claim::No(TypeReason(v, 0));
  if (!(IsNumeric(out) || out == ElemType::kBool)) return Claim::No("output has type " + ElemName(out));
  return Claim::Yes();
}

std::vector<mx::array> TranslateCast(const OpContext& c) {
  const mx::array& x = c.input(0);
  const mx::Dtype to = c.output_dtype(0);
  if (x.dtype() == to) return {x};
  return {mx::astype(x, to, c.stream)};
}

// BitCast (26): the same bytes read as another type of the same width (MLX's view). Bool is
// declined either way: a byte other than 0 or 1 read as bool has no defined value in MLX or ORT.
Claim ClaimBitCast(const NodeView& v) {
  const ElemType in = v.input_type(0), out = v.output_type(0);
  if (!IsNumeric(in) || !DeviceSupports(in)) return Claim::No(TypeReason(v, 0));
  if (!IsNumeric(out) || !DeviceSupports(out)) return Claim::No("output has type " + ElemName(out));
  const std::optional<mx::Dtype> from = ToMlxDtype(in), to = ToMlxDtype(out);
  if (!from || !to || from->size() != to->size()) return Claim::No("the types' widths differ");
  return Claim::Yes();
}

std::vector<mx::array> TranslateBitCast(const OpContext& c) {
  const mx::array& x = c.input(0);
  const mx::Dtype to = c.output_dtype(0);
  if (x.dtype() == to) return {x};
  return {mx::view(x, to, c.stream)};
}

}  // namespace

void RegisterTensorValueOps(OpRegistry& r) {
  r.Add({"", "Constant", 1, 25, ClaimConstant, TranslateConstant, HostEval::kFromValues});
  r.Add(
      {"", "ConstantOfShape", 9, 25, ClaimConstantOfShape, TranslateConstantOfShape, HostEval::kFromValues});
  r.Add({"", "Range", 11, 25, ClaimRange, TranslateRange, HostEval::kFromValues});
  r.Add({"", "Cast", 6, 25, ClaimCast, TranslateCast, HostEval::kFromValues});
  r.Add({"", "CastLike", 15, 25, ClaimCast, TranslateCast, HostEval::kFromValues});
  r.Add({"", "BitCast", 26, 28, ClaimBitCast, TranslateBitCast, HostEval::kFromValues});
}

}  // namespace mlx_ep
