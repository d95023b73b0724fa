// ScalarLeavesAsData (scalars.h).
#include "runtime/scalars.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "mlx/allocator.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"

namespace mlx_ep {
namespace {

/** True for the primitives mx::compile fuses into one kernel (mlx/compile.cpp's is_unary,
 *  is_binary, is_ternary and is_broadcast, MLX 0.32): their one-element leaf inputs are the ones
 *  MLX compiles into kernel source (it reads their values on the host for the kernel's name).
 *  Other consumers read a leaf as an ordinary input and are left as they are. */
bool MlxFuses(const mx::Primitive& p) {
  // By name: libmlx does not export the primitives' type_info. Names as DEFINE_NAME and the
  // name() overrides give them (Log2/Log10, Rsqrt, NaNEqual and the BitwiseBinary ops are
  // variants of one class each).
  static const std::unordered_set<std::string_view> kFused = {
      // unary
      "Abs", "ArcCos", "ArcCosh", "ArcSin", "ArcSinh", "ArcTan", "ArcTanh", "AsType", "Ceil", "Cos",
      "Conjugate", "Cosh", "Remainder", "Erf", "ErfInv", "Exp", "Floor", "Log", "Log2", "Log10", "Log1p",
      "LogicalNot", "Negative", "Round", "Sigmoid", "Sign", "Sin", "Sinh", "Square", "Sqrt", "Rsqrt", "Tan",
      "Tanh", "Expm1", "Real", "Imag", "BitwiseInvert",
      // binary
      "Add", "Divide", "Equal", "NaNEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd",
      "LogicalOr", "LogAddExp", "Maximum", "Minimum", "Multiply", "NotEqual", "Power", "Subtract",
      "BitwiseAnd", "BitwiseOr", "BitwiseXor", "LeftShift", "RightShift", "ArcTan2",
      // ternary, broadcast
      "Select", "Broadcast"};
  return kFused.count(p.name()) > 0;
}

/** A one-element leaf's value as a rank-0 array (a copy of its bytes). A Broadcast gives the same
 *  output from either, but MLX's fused kernels read a rank-0 input as a scalar and any other as a
 *  strided array: one [1]-shaped constant (an exporter's `3` of a hard-swish, an initializer of
 *  shape [1]) made every kernel reading it the strided variant, a loop with a stride increment
 *  per input and value that the compiler cannot vectorize (25% of PP-OCRv4's recognizer). */
mx::array RankZero(mx::array& leaf) {
  mx::array scalar(mx::allocator::malloc(leaf.itemsize()), mx::Shape{}, leaf.dtype());
  std::memcpy(scalar.data<void>(), leaf.data<void>(), leaf.itemsize());
  return scalar;
}

/** A key for a leaf's value: its dtype, shape and bytes (one replacement per distinct value). */
std::string ValueKey(mx::array& leaf) {
  std::string key =
      std::to_string(static_cast<int>(leaf.dtype().val())) + ":" + std::to_string(leaf.ndim()) + ":";
  const auto* bytes = static_cast<const char*>(leaf.data<void>());
  key.append(bytes, leaf.nbytes());
  return key;
}

/** What stands for leaf `leaf` (value key `key`): the compiled function's input for its value
 *  (scalars->inputs), else the leaf behind a Contiguous, recorded in `scalars` if `record`. */
mx::array Replacement(const mx::array& leaf, const std::string& key, ScalarInputs* scalars, bool record,
                      mx::Stream stream) {
  if (scalars && scalars->inputs) {
    const auto at = std::find(scalars->keys.begin(), scalars->keys.end(), key);
    if (at != scalars->keys.end()) return scalars->inputs->at(at - scalars->keys.begin());
  } else if (record) {
    scalars->values.push_back(leaf);
    scalars->keys.push_back(key);
  }
  return BehindContiguous(leaf, stream);
}

/** `leaf` as a trace taking `scalars` as inputs reads it: the input standing for it where it is
 *  one of the recorded leaves itself, else `leaf`. */
mx::array RecordedAs(const mx::array& leaf, const ScalarInputs& scalars) {
  for (size_t i = 0; i < scalars.values.size() && i < scalars.inputs->size(); ++i)
    if (scalars.values[i].id() == leaf.id()) return scalars.inputs->at(i);
  return leaf;
}

}  // namespace

mx::array BehindContiguous(const mx::array& a, mx::Stream stream) { return mx::contiguous(a, false, stream); }

void ScalarLeavesAsData(const std::vector<mx::array>& outputs, mx::Stream stream, ScalarInputs* scalars) {
  const bool record = scalars && !scalars->inputs && scalars->values.empty();
  std::unordered_set<std::uintptr_t> seen;
  std::map<std::string, mx::array> replaced;
  std::vector<mx::array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!a.has_primitive() || !seen.insert(a.id()).second) continue;
    const bool fused = MlxFuses(a.primitive());
    for (mx::array& in : a.inputs()) {
      if (in.has_primitive()) {
        stack.push_back(in);
        continue;
      }
      if (!fused) {
        // A recorded leaf is an input of the compiled function that takes the scalars: other
        // readers of it (a softmax primitive reading the fill that a Multiply also reads) take
        // that function's input too, or mx::compile finds its own input in the graph and throws.
        if (scalars && scalars->inputs) in = RecordedAs(in, *scalars);
        continue;
      }
      // A leaf the trace made holds its data already (host memory: MLX reads it there too, for
      // the kernel's name); a placeholder of mx::compile's trace (an input of the function) has
      // none and is an input of the fused kernels anyway.
      if (in.size() != 1 || in.is_tracer() || !in.is_available() || in.data<void>() == nullptr) continue;
      mx::array leaf = in.ndim() > 0 && a.primitive().name() == std::string_view("Broadcast") ? RankZero(in) : in;
      std::string key = ValueKey(leaf);
      auto it = replaced.find(key);
      if (it == replaced.end())
        it = replaced.emplace(key, Replacement(leaf, key, scalars, record, stream)).first;
      in = it->second;
    }
  }
}

}  // namespace mlx_ep
