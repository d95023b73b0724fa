// CUDA C++ text shared by the headers of the EP's custom kernels: mx::fast::cuda_kernel compiles
// each kernel's text on its own, so kernels share source, not code.
#pragma once

namespace mlx_ep {

/** mlx_ep_cuda::block_reduce<MAX>(v, red): the block-wide max (MAX) or sum of every thread's `v`,
 *  the same value in every thread; `red` holds one float per warp, blockDim.x is a multiple of
 *  32. The sum's order is fixed: a warp's butterfly, then the warps' partial sums in order. And
 *  mlx_ep_cuda::negative_infinity(). */
inline constexpr const char* kBlockReduceSource = R"(
namespace mlx_ep_cuda {

// -inf without the C library's INFINITY, which NVRTC need not have (as attention_vjp_cuda.cc's
// kernels, which ran on the H200, spell it).
__device__ __forceinline__ float negative_infinity() { return -__int_as_float(0x7f800000); }

template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // a previous reduction's readers are done with `red`
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) r = MAX ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

}  // namespace mlx_ep_cuda
)";

}  // namespace mlx_ep
