// Reshapes of reshapes in a traced graph read the first one's input instead.
#pragma once

#include <vector>

#include "mlx/array.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** Rewrites the graph behind `outputs` so that no Reshape reads the output of another Reshape
 *  still to evaluate: it reads that one's input (a row-major reshape of a row-major reshape is
 *  one reshape), and a Reshape that then gives its input's own shape is replaced by its input
 *  where an array reads it (not where it is one of `outputs`). Translations reshape per node: a
 *  pointwise Conv's product is reshaped back to an image that the next pointwise Conv reshapes
 *  to a matrix again, and each Reshape is a primitive every run evaluates (a task on MLX's CPU
 *  stream, host encoding on a GPU). Returns the reads it rewired. */
size_t CollapseReshapeChains(const std::vector<mx::array>& outputs);

}  // namespace mlx_ep
