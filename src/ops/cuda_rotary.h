// CUDA C++ text of the rotary embedding as ORT's GroupQueryAttention computes it, shared by the
// EP's custom kernels that rotate (the decode step's, attention_gqa_cuda.cc; a prompt's Q/K/V,
// attention_gqa_prefill_cuda.cc): mx::fast::cuda_kernel compiles each kernel's text on its own.
#pragma once

namespace mlx_ep {

/** mlx_ep_cuda::rotated<ROT, INTERLEAVED>(x, c, s, d): value d of row x after the rotation by
 *  cos/sin row (c, s) of ROT / 2 values (ROT = 0: none): pairs (i, i + ROT / 2), or (2i, 2i + 1)
 *  when INTERLEAVED, in float32, rounded to T (ORT stores the rotated Q and K in T). */
inline constexpr const char* kRotarySource = R"(
namespace mlx_ep_cuda {

template <int ROT, bool INTERLEAVED, typename T>
__device__ __forceinline__ T rotated(const T* x, const T* c, const T* s, int d) {
  if (d >= ROT) return x[d];
  constexpr int HALF = ROT / 2;
  const bool second = INTERLEAVED ? (d & 1) != 0 : d >= HALF;
  const int i = INTERLEAVED ? d / 2 : (second ? d - HALF : d);
  const float x1 = static_cast<float>(INTERLEAVED ? x[2 * i] : x[i]);
  const float x2 = static_cast<float>(INTERLEAVED ? x[2 * i + 1] : x[i + HALF]);
  const float co = static_cast<float>(c[i]), si = static_cast<float>(s[i]);
  return static_cast<T>(second ? x1 * si + x2 * co : x1 * co - x2 * si);
}

}  // namespace mlx_ep_cuda
)";

}  // namespace mlx_ep
