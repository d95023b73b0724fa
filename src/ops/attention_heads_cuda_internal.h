// What the heads-attention kernels share (attention_heads_cuda.cc: the plan, the launch and the
// CUDA-core kernel, a warp a query row; attention_heads_mma_cuda.cc: the tensor-core kernel, a warp
// 16 query rows): their layouts' device text and the tensor-core kernel's entry points.
#pragma once

#include <string>

#include "mlx/fast.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** mlx_ep_heads::matrix_offset(m, shape, strides, ndim): where matrix m (an index over the leading
 *  ndim - 2 dims, row-major) starts in an array of these shape and strides.
 *  mlx_ep_heads::aligned16(p): whether p may be read 16 bytes at a time (as uint4).
 *  mlx_ep_heads::Terms<T>: the scaling's value and a query row's mask row (its step along the keys:
 *  0 where it repeats); row_terms<T, SCALE, MASK>(...) makes them for row `row` of the scores.
 *  mlx_ep_heads::mask_row_offset(row, x_shape, x_ndim, mask_shape, mask_strides, mask_ndim): where
 *  row `row` of the scores [..., S, S'] (x_shape: the scores' leading dims and S) starts in the
 *  mask broadcast to them (the mask's dims aligned with the scores' last ones; a dim of 1
 *  repeats), through the mask's strides: an operand computed in the graph need not be row-major. */
inline constexpr const char* kHeadsLayoutSource = R"(
namespace mlx_ep_heads {

template <typename S, typename St>
__device__ __forceinline__ int64_t matrix_offset(int64_t m, const S& shape, const St& strides, int ndim) {
  int64_t offset = 0;
  for (int d = ndim - 3; d >= 0; --d) {
    offset += (m % shape[d]) * strides[d];
    m /= shape[d];
  }
  return offset;
}

template <typename S, typename St>
__device__ __forceinline__ int64_t mask_row_offset(int64_t row, const S& x_shape, int x_ndim, const S& mask_shape,
                                                  const St& mask_strides, int mask_ndim) {
  int64_t offset = 0;
  for (int d = x_ndim - 2, m = mask_ndim - 2; d >= 0 && m >= 0; --d, --m) {
    const int64_t i = row % x_shape[d];
    row /= x_shape[d];
    if (mask_shape[m] != 1) offset += i * mask_strides[m];
  }
  return offset;
}

__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

template <typename T>
struct Terms {
  float f;
  const T* mask_row;
  int64_t mask_step;
};

template <typename T, int SCALE, bool MASK, typename S, typename St>
__device__ __forceinline__ Terms<T> row_terms(const T* factor, const T* mask, int64_t row, const S& q_shape, int nd,
                                              const S& mask_shape, const St& mask_strides, int mask_ndim) {
  Terms<T> terms{SCALE != 0 ? static_cast<float>(factor[0]) : 1.f, mask, 0};
  if (MASK) {
    terms.mask_row += mask_row_offset(row, q_shape, nd, mask_shape, mask_strides, mask_ndim);
    terms.mask_step = mask_shape[mask_ndim - 1] != 1 ? mask_strides[mask_ndim - 1] : 0;
  }
  return terms;
}

}  // namespace mlx_ep_heads
)";

/** The tensor-core kernel's device text before its body (the layouts and score terms included). */
const std::string& HeadsMmaHeader();

/** The tensor-core kernel's body, MLX's cuda_kernel's `source` (constants T, D, SCALE, MASK,
 *  BODY16 as the CUDA-core kernel's). */
const char* HeadsMmaBody();

/** The tensor-core kernel as MLX's cuda_kernel, named mlx_ep_heads_attention_mma. */
const mx::fast::CustomKernelFunction& HeadsMmaKernel();

}  // namespace mlx_ep
