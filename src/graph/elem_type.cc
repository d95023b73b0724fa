#include "graph/elem_type.h"

namespace mlx_ep {

size_t ElemSize(ElemType t) {
  switch (t) {
    case ElemType::kBool:
    case ElemType::kUInt8:
    case ElemType::kInt8:
      return 1;
    case ElemType::kUInt16:
    case ElemType::kInt16:
    case ElemType::kFloat16:
    case ElemType::kBFloat16:
      return 2;
    case ElemType::kFloat:
    case ElemType::kInt32:
    case ElemType::kUInt32:
      return 4;
    case ElemType::kDouble:
    case ElemType::kInt64:
    case ElemType::kUInt64:
    case ElemType::kComplex64:
      return 8;
    case ElemType::kComplex128:
      return 16;
    default:
      return 0;
  }
}

std::string ElemName(ElemType t) {
  switch (t) {
    case ElemType::kFloat:
      return "float";
    case ElemType::kUInt8:
      return "uint8";
    case ElemType::kInt8:
      return "int8";
    case ElemType::kUInt16:
      return "uint16";
    case ElemType::kInt16:
      return "int16";
    case ElemType::kInt32:
      return "int32";
    case ElemType::kInt64:
      return "int64";
    case ElemType::kString:
      return "string";
    case ElemType::kBool:
      return "bool";
    case ElemType::kFloat16:
      return "float16";
    case ElemType::kDouble:
      return "double";
    case ElemType::kUInt32:
      return "uint32";
    case ElemType::kUInt64:
      return "uint64";
    case ElemType::kComplex64:
      return "complex64";
    case ElemType::kComplex128:
      return "complex128";
    case ElemType::kBFloat16:
      return "bfloat16";
    default:
      return "type" + std::to_string(static_cast<int>(t));
  }
}

bool IsFloating(ElemType t) {
  return t == ElemType::kFloat || t == ElemType::kFloat16 || t == ElemType::kBFloat16 ||
         t == ElemType::kDouble;
}

bool IsSignedInteger(ElemType t) {
  return t == ElemType::kInt8 || t == ElemType::kInt16 || t == ElemType::kInt32 || t == ElemType::kInt64;
}

bool IsInteger(ElemType t) {
  return IsSignedInteger(t) || t == ElemType::kUInt8 || t == ElemType::kUInt16 || t == ElemType::kUInt32 ||
         t == ElemType::kUInt64;
}

}  // namespace mlx_ep
