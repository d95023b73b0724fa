// e^t in float32 lanes for softmax's t = x - max <= 0 (src/ops/unary_cpu.cc), in a header of its
// own so that the C++ tests check it against float64 directly.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/cpu_primitive.h"  // MLX_EP_INLINE

namespace mlx_ep {

/** e^t for float t <= 0 (softmax's x - max; NaN passes through), in float32 lanes: within 0.9
 *  ulp of e^t over [-104, 0] with FMA, 1.2 without (every 61st float there against float64,
 *  tests/cpp/cpu_primitive_test.cc), 0 below. Float lanes are twice double's, and the row's result does not
 *  need more: x - max is rounded to float32 before e^, as the composed form rounds it, and that
 *  rounding alone moves e^(x - max) by |x - max| * 2^-24 (tens of ulps for scores tens apart),
 *  where this adds < 1 ulp.
 *  n = round(t / ln2) through 1.5 * 2^23, r = t - n ln2 with ln2 in two parts (n * the high part
 *  is exact), Taylor to r^7 (|r| <= ln2/2: 2e-8 relative), then 2^(n + 64) and 2^-64 as two
 *  float scalings, so that a subnormal result is rounded once. */
MLX_EP_INLINE float ExpNonPositive(float t) {
  t = t < -104.0f ? -104.0f : t;  // e^-104 rounds to 0 (a NaN compares false and stays)
  const float shifted = t * 1.44269504088896341f + 12582912.0f;
  const float n = shifted - 12582912.0f;
  float r = t - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  float p = 1.0f / 5040;
  for (const float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = p * r + c;
  uint32_t bits;  // 0x4B400000 + n: the float 1.5 * 2^23 + n
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits - 0x4B400000u + 127u + 64u) << 23;  // the exponent field of 2^(n + 64), n >= -151
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return (p * scale) * 5.421010862427522e-20f;  // * 2^-64
}

}  // namespace mlx_ep
