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

/** exp(x0) as Cephes' expf: x0 = n ln 2 + r with ln 2 in two parts (Cody-Waite, r exact to
 *  float32), e^r by a degree-5 polynomial on |r| <= ln 2 / 2, times 2^n. At most 1 ulp from the
 *  correctly rounded value over the softmax's arguments [-87.3, 0] (MLX's CPU exp, which reduces
 *  x0 log2 e instead, errs by up to 64 ulp there, 8 over [-10, 0]). 0 below -88, inf above 88. */
inline float ExpScalar(float x0) {
  if (std::isnan(x0)) return x0;
  if (x0 > 88.f) return std::numeric_limits<float>::infinity();
  if (x0 < -88.f) return 0.f;
  const float n = std::floor(std::fma(x0, 1.44269504088896341f, 0.5f));
  const float r = std::fma(n, 2.12194440e-4f, std::fma(n, -0.693359375f, x0));
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  const float e = std::fma(p, r * r, r) + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // n in [-127, 127]
  float two;
  std::memcpy(&two, &bits, sizeof two);
  return e * two;
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
