// The loops of GroupQueryAttention's CPU kernel (attention_gqa_cpu.cc) over one query row's keys:
// scores, exp and the weighted sum of V rows, portable and AVX2 (attention_gqa_cpu_loops.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mlx_ep {
namespace gqa_cpu {

template <typename T>
inline float Widen(T x) {
  return static_cast<float>(x);
}

/** MLX's exp (mlx/backend/cpu/simd/math.h) of one value: 2^(x log2 e) as 2^round * a polynomial. */
inline float ExpScalar(float x0) {
  if (std::isnan(x0)) return x0;
  if (x0 > 88.f) return std::numeric_limits<float>::infinity();
  if (x0 < -88.f) return 0.f;
  const float x = x0 * 1.442695f;
  const float ipart = std::floor(x + 0.5f), f = x - ipart;
  float r = 1.535336188319500e-4f;
  r = std::fma(r, f, 1.339887440266574e-3f);
  r = std::fma(r, f, 9.618437357674640e-3f);
  r = std::fma(r, f, 5.550332471162809e-2f);
  r = std::fma(r, f, 2.402264791363012e-1f);
  r = std::fma(r, f, 6.931472028550421e-1f);
  r = std::fma(r, f, 1.000000000000000f);
  const int32_t bits = (static_cast<int32_t>(ipart) + 127) << 23;
  float two;
  std::memcpy(&two, &bits, sizeof two);
  return two * r;
}

/** The three loops of a row, for one element type: scores of n key rows, exp in place, V rows
 *  weighted into y. */
template <typename T>
struct RowOps {
  void (*scores)(const float* q, const T* k, int64_t n, int D, float* out);
  float (*exp_shift)(float* x, int64_t n, float max);  ///< x = exp(x - max); returns the sum
  void (*accumulate)(const float* w, const T* v, int64_t n, int D, float* y);
};

/** The loops for head size D: AVX2 where the CPU has it and D is a multiple of 8, unless
 *  `portable`. Instantiated for float, mx::float16_t and mx::bfloat16_t. */
template <typename T>
RowOps<T> ChooseOps(int D, bool portable);

}  // namespace gqa_cpu
}  // namespace mlx_ep
