// Shared by the block-quantized op families (quantized.cc, quantized_gather.cc).
#pragma once

#include "ops/op.h"

namespace mlx_ep {

/** Splits each byte of `packed` ([..., n] uint8) into its 8 / bits fields of `bits` bits, low
 *  bits first (ORT's packing): [..., n * 8 / bits] uint8. bits is 2, 4 or 8. */
mx::array UnpackBits(const mx::array& packed, int bits, mx::Stream s);

class OpRegistry;
/** GatherBlockQuantized (quantized_gather.cc), registered by RegisterQuantizedOps. */
void RegisterQuantizedGatherOps(OpRegistry& r);

}  // namespace mlx_ep
