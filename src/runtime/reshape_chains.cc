// CollapseReshapeChains (reshape_chains.h).
#include "runtime/reshape_chains.h"

#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "mlx/primitives.h"

namespace mlx_ep {
namespace {

/** A Reshape still to evaluate (by name: libmlx does not export the primitives' type_info). */
bool IsPendingReshape(const mx::array& a) {
  return a.has_primitive() && !a.is_available() && std::string_view(a.primitive().name()) == "Reshape";
}

/** Points `reshape` past the pending Reshapes it reads. Returns the reads rewired. */
size_t ReadPastReshapes(mx::array& reshape) {
  size_t rewired = 0;
  mx::array& in = reshape.inputs()[0];
  for (; IsPendingReshape(in); ++rewired) in = mx::array(in.inputs()[0]);  // copied first: `in` owns it
  return rewired;
}

}  // namespace

size_t CollapseReshapeChains(const std::vector<mx::array>& outputs) {
  size_t rewired = 0;
  std::unordered_set<std::uintptr_t> seen;
  std::vector<mx::array> stack(outputs.begin(), outputs.end());
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (!a.has_primitive() || a.is_available() || !seen.insert(a.id()).second) continue;
    if (IsPendingReshape(a)) rewired += ReadPastReshapes(a);
    for (mx::array& in : a.inputs()) {
      if (IsPendingReshape(in)) {
        rewired += ReadPastReshapes(in);
        if (in.inputs()[0].shape() == in.shape()) {
          in = mx::array(in.inputs()[0]);
          ++rewired;
        }
      }
      stack.push_back(in);
    }
  }
  return rewired;
}

}  // namespace mlx_ep
