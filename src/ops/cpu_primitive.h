// The eval_cpu of the EP's own MLX primitives (MatMulNBits' kernels, GroupQueryAttention's), which
// run loops of ours on MLX's CPU stream.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** An input for DispatchCpuKernel, whose loops index it flat: `a` itself when it is an evaluated
 *  constant that is row-contiguous already (an initializer), else mx::contiguous. A node on a
 *  constant is still a node that every run of a compiled function evaluates: MatMulNBits' Flatten
 *  and Contiguous of B and scales were 242 of the 2,566 primitives of a Qwen2-0.5B int4 decode
 *  step. */
inline mx::array RowContiguous(const mx::array& a, mx::Stream s) {
  if (!a.has_primitive() && a.is_available() && a.flags().row_contiguous) return a;
  return mx::contiguous(a, false, s);
}

/** Allocates `out` and runs `compute(inputs, out)` on `stream`'s CPU command encoder, as MLX's own
 *  CPU primitives do: the encoder holds the arrays until the task has run; the task gets weak
 *  copies. The loops index their inputs flat: `name` (the primitive's) says so in the error when
 *  one is not row-contiguous. */
template <typename Compute>
void DispatchCpuKernel(const char* name, mx::Stream stream, const std::vector<mx::array>& inputs, mx::array& out,
                       Compute compute) {
  for (const mx::array& a : inputs)
    if (!a.flags().row_contiguous) throw std::runtime_error(std::string(name) + ": inputs must be row-contiguous");
  out.set_data(mx::allocator::malloc(out.nbytes()));
  auto& encoder = mx::cpu::get_command_encoder(stream);
  std::vector<mx::array> in;
  for (const mx::array& a : inputs) {
    encoder.set_input_array(a);
    in.push_back(mx::array::unsafe_weak_copy(a));
  }
  encoder.set_output_array(out);
  encoder.dispatch([in = std::move(in), out = mx::array::unsafe_weak_copy(out), compute = std::move(compute)]() mutable {
    compute(in, out);
  });
}

}  // namespace mlx_ep
