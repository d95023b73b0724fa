// Host stand-ins for the CUDA built-ins the AttentionVJP kernels use (attention_vjp_cuda.cc), so
// test_attention_vjp_kernel.py can run the kernels' very source on the CPU: each warp runs as 32
// threads, and __shfl_xor_sync exchanges through a barrier (all 32 lanes must reach every shuffle,
// as on a GPU). blockIdx / threadIdx are per thread; the launch below mirrors MLX's cuda_kernel
// (blocks of min(threadgroup, grid) threads, ceil(grid / threadgroup) of them).
#pragma once

#include <algorithm>
#include <array>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __grid_constant__

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local Dim3 blockIdx, threadIdx;
inline Dim3 blockDim;

namespace mlx::core::cu {
using Shape = std::array<int32_t, 10>;
}
namespace cooperative_groups {}

inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
using std::min;

struct WarpExchange {
  std::barrier<> barrier{32};
  float slot[32];
};
inline thread_local WarpExchange* warp_exchange = nullptr;

inline float __shfl_xor_sync(unsigned, float x, int offset) {
  const int lane = threadIdx.x % 32;
  warp_exchange->slot[lane] = x;
  warp_exchange->barrier.arrive_and_wait();
  const float other = warp_exchange->slot[lane ^ offset];
  warp_exchange->barrier.arrive_and_wait();
  return other;
}

/** Runs `kernel` over `grid` threads in blocks of `threadgroup`, one warp (32 threads) at a time. */
inline void Launch(int grid, int threadgroup, const std::function<void()>& kernel) {
  const int block = std::min(threadgroup, grid), blocks = (grid + threadgroup - 1) / threadgroup;
  blockDim = {static_cast<unsigned>(block), 1, 1};
  for (int b = 0; b < blocks; ++b) {
    for (int w = 0; w < block; w += 32) {
      WarpExchange exchange;
      std::vector<std::thread> lanes;
      for (int lane = 0; lane < 32; ++lane)
        lanes.emplace_back([&, lane] {
          blockIdx = {static_cast<unsigned>(b), 0, 0};
          threadIdx = {static_cast<unsigned>(w + lane), 0, 0};
          warp_exchange = &exchange;
          kernel();
        });
      for (std::thread& t : lanes) t.join();
    }
  }
}
