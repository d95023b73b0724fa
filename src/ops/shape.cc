// Op family: placeholder, filled in by the op-family work.
#include "ops/registry.h"

namespace mlx_ep {

void RegisterShapeOps(OpRegistry&) {}

}  // namespace mlx_ep
