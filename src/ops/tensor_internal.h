// Declarations shared by the files of the tensor op family (ops/tensor*.cc).
#pragma once

#include "ops/registry.h"

namespace mlx_ep {

/** Constant, ConstantOfShape, Range, Cast, CastLike, BitCast (ops/tensor_const.cc). */
void RegisterTensorValueOps(OpRegistry& r);

/** GatherElements (ops/gather_elements.cc). */
void RegisterGatherElementsOps(OpRegistry& r);

/** TensorScatter (ops/tensor_scatter.cc). */
void RegisterTensorScatterOps(OpRegistry& r);

}  // namespace mlx_ep
