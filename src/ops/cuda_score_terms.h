// CUDA C++ text shared by the kernels that read attention's scores as their terms (softmax_cuda.cc,
// attention_heads_cuda.cc; softmax_scores.h says what the terms are): one rounding of the steps
// MLX's ops take, so that the two kernels cannot round a score differently.
#pragma once

namespace mlx_ep {

/** mlx_ep_scores::rounded<T>(v): v rounded to T and back to float32, as an op in T leaves it.
 *  mlx_ep_scores::scaled_masked<T, SCALE, MASK>(a, f, mask_row, mask_step, key): score `a` (already
 *  in T) divided (SCALE 1) or multiplied (SCALE 2) by f, then + mask_row[mask_step * key] (MASK),
 *  each step one IEEE float32 operation rounded to T, as MLX's ops on T compute it. */
inline constexpr const char* kScoreTermsSource = R"(
namespace mlx_ep_scores {

template <typename T>
__device__ __forceinline__ float rounded(float v) { return static_cast<float>(static_cast<T>(v)); }

template <typename T, int SCALE, bool MASK>
__device__ __forceinline__ float scaled_masked(float a, float f, const T* mask_row, int64_t mask_step, int64_t key) {
  if constexpr (SCALE == 1) a = rounded<T>(__fdiv_rn(a, f));
  if constexpr (SCALE == 2) a = rounded<T>(__fmul_rn(a, f));
  if constexpr (MASK) a = rounded<T>(__fadd_rn(a, static_cast<float>(mask_row[mask_step * key])));
  return a;
}

}  // namespace mlx_ep_scores
)";

}  // namespace mlx_ep
