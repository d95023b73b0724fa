// Which MLX primitive made an array, by name: the EP's kernels read the traced graph behind their
// inputs (attention's scores, a residual sum) to take over the ops that made them.
#pragma once

#include <cstring>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** True when `a` is the output of an MLX primitive named `primitive` ("Matmul", "Add", ...): by
 *  name, as MLX's shared library exports no typeinfo for its primitives. */
inline bool IsPrimitive(const mx::array& a, const char* primitive) {
  return a.has_primitive() && std::strcmp(a.primitive().name(), primitive) == 0;
}

}  // namespace mlx_ep
