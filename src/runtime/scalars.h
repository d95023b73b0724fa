// Scalars in a traced graph as data of MLX's fused kernels, not as constants of their source.
#pragma once

#include <string>
#include <vector>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** The one-element leaves ScalarLeavesAsData hides in a trace, so that a later trace of the same
 *  function can take them as inputs of the compiled function instead: a Contiguous is a
 *  primitive that every run evaluates (no copy, but ~2.6 us each on MLX's CPU device, 27 of a
 *  BERT's 123), an input of a compiled function costs nothing per run, and mx::compile reads an
 *  input as data, not as a constant of its kernels' source, as it does the Contiguous. */
struct ScalarInputs {
  std::vector<mx::array> values;  ///< each distinct leaf, in the order the first trace found them
  std::vector<std::string> keys;  ///< their values' keys (dtype, rank, bytes)
  /** During a trace that takes them as inputs: the compiled function's inputs standing for
   *  `values`, one each, in order (leaves of other values still go behind a Contiguous). */
  const std::vector<mx::array>* inputs = nullptr;
};

/** Rewrites the graph behind `outputs` so that no one-element leaf array (a scalar the trace
 *  created: a length, an index bound, a fold of Shape, 0.5f) is an input of an op mx::compile
 *  fuses (elementwise and Broadcast). MLX writes the value of every such leaf into the source of
 *  the fused kernel that reads it, so a scalar that follows a dim (a prompt's length) makes MLX
 *  generate and build new kernels for every size of that dim: on its CPU backend one run of the
 *  host's C++ compiler per kernel (0.1-0.5 s each), on CUDA one NVRTC compile each. Each distinct
 *  value gets one replacement behind a Contiguous (which MLX does not fuse), so the kernel reads
 *  it as an input and one kernel serves every value. Values and dtypes are unchanged. With
 *  `scalars`, the leaves it hides are recorded there (when scalars->inputs is null and it holds
 *  none yet), or replaced by scalars->inputs (see ScalarInputs). */
void ScalarLeavesAsData(const std::vector<mx::array>& outputs, mx::Stream stream,
                        ScalarInputs* scalars = nullptr);

/** `a` behind a Contiguous: mx::compile does not fuse one, so a fused kernel ends at `a` (which
 *  it writes, rounded) or reads it as an input; on a row-contiguous `a` (a leaf) it shares the
 *  buffer (no copy, no kernel). One primitive where two Reshapes were (a reshape to the same
 *  shape returns the array itself); a StopGradient does not do: the kernel-reuse test fails. */
mx::array BehindContiguous(const mx::array& a, mx::Stream stream);

}  // namespace mlx_ep
