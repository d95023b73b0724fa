// float16 Softmax-13+ as its ONNX function body (every step rounded to float16, see
// normalization.cc) in one CUDA kernel where the composed body takes four or more.
#pragma once

#include <optional>

#include "ops/op.h"

namespace mlx_ep {

/** Softmax over the last axis of float16 `x` [..., n], each step of ONNX's function body
 *  (ReduceMax, Sub, Exp, ReduceSum, Div) rounded to float16 as SoftmaxFunctionBody does, through
 *  the kernel (softmax_cuda.cc); nullopt where it does not run (not a CUDA stream, too many rows
 *  for one launch, or its one-time self check failed). */
std::optional<mx::array> SoftmaxBodyKernel(const mx::array& x, mx::Stream s);

}  // namespace mlx_ep
