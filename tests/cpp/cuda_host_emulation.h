// Just enough of CUDA's device environment on the host to run the EP's kernel sources (as MLX's
// cuda_kernel receives them) on a CPU: a block is blockDim.x std::threads, a warp's shuffles meet
// at a barrier of its 32 threads, blocks run one after another. Rounding intrinsics are plain
// float operations (compile with -ffp-contract=off); half types come from CUDA's own headers,
// which work on the host. Used by nbits_kernel_test.cc, which compiles a program from this file,
// the kernel sources and nbits_kernel_driver.inc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __forceinline__ inline
// One instance per kernel instantiation, shared by the block's threads (blocks run in turn).
#define __shared__ static

struct EmulatedDim3 {
  unsigned x = 0, y = 0, z = 0;
};
thread_local EmulatedDim3 threadIdx;
EmulatedDim3 blockIdx, blockDim, gridDim;

struct EmulatedWarp {
  std::barrier<> meet{32};
  float slot[32] = {};
  unsigned fragments[32][6] = {};  // each lane's A and B registers of an mma
};
thread_local EmulatedWarp* current_warp = nullptr;
thread_local std::barrier<>* current_block = nullptr;

inline void __syncthreads() { current_block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { current_warp->meet.arrive_and_wait(); }

inline float __int_as_float(int bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline int min(int a, int b) { return a < b ? a : b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }

// Blocks run one after another: a block's atomics and fences need no more than this.
inline void __threadfence() {}
inline int atomicAdd(int* p, int v) {
  const int old = *p;
  *p += v;
  return old;
}
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
// A load the device does at T's alignment (16 bytes for uint4): one past it faults there, so it
// aborts here (the host would read it unaligned).
template <class T>
inline T __ldg(const T* p) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) {
    std::fprintf(stderr, "misaligned __ldg of %zu bytes at %p\n", sizeof(T), static_cast<const void*>(p));
    std::abort();
  }
  return *p;
}

inline float __shfl_xor_sync(unsigned, float value, int mask) {
  const unsigned lane = threadIdx.x & 31u;
  current_warp->slot[lane] = value;
  current_warp->meet.arrive_and_wait();
  const float other = current_warp->slot[lane ^ static_cast<unsigned>(mask)];
  current_warp->meet.arrive_and_wait();  // nobody overwrites a slot before every lane read it
  return other;
}

// Kernel sources take this in place of PTX's mma.sync (inline assembly the host cannot run).
#define MLX_EP_HOST_EMULATION 1

/** PTX's mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 for the calling warp: c += A B, from the
 *  fragments as the PTX ISA lays them out (lane = 4 g + t; A's registers {row g, cols 2t, 2t + 1},
 *  {row g + 8, same}, {row g, cols 2t + 8, 2t + 9}, {row g + 8, same}; B's {rows 2t, 2t + 1 of col
 *  g}, {rows 2t + 8, 2t + 9}; C's {row g, cols 2t, 2t + 1}, {row g + 8, same}; low half first),
 *  each product exact in float32 and summed in float32 along k. */
template <class T>
inline void emulated_mma_m16n8k16(float* c, const unsigned* a, const unsigned* b) {
  const unsigned lane = threadIdx.x & 31u;
  unsigned* mine = current_warp->fragments[lane];
  for (int r = 0; r < 4; ++r) mine[r] = a[r];
  mine[4] = b[0], mine[5] = b[1];
  current_warp->meet.arrive_and_wait();
  auto value = [](unsigned reg, int k) {  // element k % 2 of a register of two T
    const unsigned short half_bits = static_cast<unsigned short>(k % 2 ? reg >> 16 : reg & 0xffffu);
    T x;
    std::memcpy(&x, &half_bits, sizeof x);
    return static_cast<float>(x);
  };
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3u);
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
    float sum = c[e];
    for (int k = 0; k < 16; ++k) {
      const unsigned* a_lane = current_warp->fragments[4 * (row % 8) + (k % 8) / 2];
      const unsigned* b_lane = current_warp->fragments[4 * col + (k % 8) / 2];
      sum += value(a_lane[row / 8 + 2 * (k / 8)], k) * value(b_lane[4 + k / 8], k);
    }
    c[e] = sum;
  }
  current_warp->meet.arrive_and_wait();  // nobody overwrites its fragments before every lane read them
}

/** Runs `body` as MLX launches a custom kernel: `total` threads in blocks of `per_block` along
 *  x, times `grid_y` blocks along y (MLX's grid counts threads; y's blocks here are one thread
 *  high). */
template <class Body>
void EmulatedLaunch(int64_t total, int per_block, Body body, int grid_y = 1) {
  const int threads = static_cast<int>(total < per_block ? total : per_block);
  const int64_t blocks = (total + per_block - 1) / per_block;
  gridDim.x = static_cast<unsigned>(blocks);
  gridDim.y = static_cast<unsigned>(grid_y);
  blockDim.x = static_cast<unsigned>(threads);
  for (int64_t block = 0; block < blocks * grid_y; ++block) {
    blockIdx.x = static_cast<unsigned>(block % blocks);
    blockIdx.y = static_cast<unsigned>(block / blocks);
    std::vector<std::unique_ptr<EmulatedWarp>> warps;
    for (int w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<EmulatedWarp>());
    std::barrier<> block_barrier(threads);
    std::vector<std::thread> lanes;
    for (int t = 0; t < threads; ++t)
      lanes.emplace_back([&, t] {
        threadIdx.x = static_cast<unsigned>(t);
        current_warp = warps[t / 32].get();
        current_block = &block_barrier;
        body();
      });
    for (std::thread& lane : lanes) lane.join();
  }
}

/** MLX's Shape argument: the array's dimensions. */
struct Shape {
  int32_t v[8] = {};
  int32_t operator[](int i) const { return v[i]; }
};

/** MLX's Strides argument: the array's strides in elements. */
struct Strides {
  int64_t v[8] = {};
  int64_t operator[](int i) const { return v[i]; }
};
