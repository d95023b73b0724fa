// ONNX tensor element types, with the same numbering as onnx.TensorProto.DataType
// (and ONNXTensorElementDataType), so values cross the ABI without a table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mlx_ep {

enum class ElemType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
};

/** Size in bytes of one element, 0 for types without a fixed size (string, undefined). */
size_t ElemSize(ElemType t);

/** ONNX-style name of the type: "float", "int64", "bfloat16", ... */
std::string ElemName(ElemType t);

/** True for float, float16, bfloat16 and double. */
bool IsFloating(ElemType t);

/** True for the signed and unsigned integer types (not bool). */
bool IsInteger(ElemType t);

/** True for the signed integer types. */
bool IsSignedInteger(ElemType t);

}  // namespace mlx_ep
