// ScalarLeavesAsData (scalars.h).
#include "runtime/scalars.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>

#include "mlx/ops.h"

namespace mlx_ep {
namespace {

/** `leaf` behind two Reshapes (mx::reshape returns an array of the same shape itself). */
mx::array AsData(const mx::array& leaf, mx::Stream s) {
  const mx::Shape other = leaf.ndim() == 1 ? mx::Shape{} : mx::Shape{1};
  return mx::reshape(mx::reshape(leaf, other, s), leaf.shape(), s);
}

/** A key for a leaf's value: its dtype, shape and bytes (one replacement per distinct value). */
std::string ValueKey(mx::array& leaf) {
  std::string key = std::to_string(static_cast<int>(leaf.dtype().val())) + ":" + std::to_string(leaf.ndim()) + ":";
  const auto* bytes = static_cast<const char*>(leaf.data<void>());
  key.append(bytes, leaf.nbytes());
  return key;
}

}  // namespace

void ScalarLeavesAsData(const std::vector<mx::array>& outputs, mx::Stream stream) {
  std::unordered_set<std::uintptr_t> seen;
  std::map<std::string, mx::array> replaced;
  std::vector<mx::array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!a.has_primitive() || !seen.insert(a.id()).second) continue;
    for (mx::array& in : a.inputs()) {
      if (in.has_primitive()) {
        stack.push_back(in);
        continue;
      }
      // A leaf the trace made holds its data already; a placeholder of mx::compile's trace (an
      // input of the function) has none and is an input of the fused kernels anyway.
      if (in.size() != 1 || in.is_tracer() || !in.is_available() || in.data<void>() == nullptr) continue;
      auto it = replaced.find(ValueKey(in));
      if (it == replaced.end()) it = replaced.emplace(ValueKey(in), AsData(in, stream)).first;
      in = it->second;
    }
  }
}

}  // namespace mlx_ep
