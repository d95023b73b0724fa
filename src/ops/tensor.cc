// Op family: placeholder, filled in by the op-family work.
#include "ops/registry.h"

namespace mlx_ep {

void RegisterTensorOps(OpRegistry&) {}

}  // namespace mlx_ep
