// What the EP's custom CUDA kernels share: the launch they plan for MLX's cuda_kernel; and, for the
// one-block-a-row kernels (normalization_cuda.cc, softmax_cuda.cc), a row's block size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mlx/fast.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** What a kernel hands MLX's cuda_kernel: its inputs, its outputs' shapes and dtypes, the threads
 *  of its grid, a block's threads and the constants its body names. */
struct KernelLaunch {
  std::vector<mx::array> inputs;
  std::vector<mx::Shape> output_shapes;
  std::vector<mx::Dtype> output_dtypes;
  int threads;
  int per_block;
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> constants;
};

/** `threads` rounded up to whole blocks of `per_block`, or nullopt past what MLX's grid takes
 *  (its count of threads is an int). */
inline std::optional<int> WholeBlocks(int64_t threads, int per_block) {
  const int64_t blocks = (threads + per_block - 1) / per_block;
  if (blocks > (int64_t{1} << 30) / per_block) return std::nullopt;
  return static_cast<int>(blocks * per_block);
}

/** The most values a row kernel takes a row: 16 a thread in blocks of 1,024. */
constexpr int kMaxKernelRow = 16384;

/** The row kernels' block sizes, each with the longest row it takes: {longest, threads}. */
constexpr std::pair<int, int> kRowKernelBlocks[] = {{32, 32},    {64, 64},    {1024, 128},
                                                    {4096, 256}, {8192, 512}, {kMaxKernelRow, 1024}};

/** A block's threads for rows of n values (n <= kMaxKernelRow): a multiple of 32 (the block
 *  reduction's warps), at most 16 values a thread. */
inline int RowKernelThreads(int n) {
  for (const auto& [longest, threads] : kRowKernelBlocks)
    if (n <= longest) return threads;
  return 1024;
}

/** The most values a thread holds in blocks of `threads` (RowKernelThreads'): its longest row's,
 *  so that a kernel reading its row's length at run time compiles once a block size. */
inline int RowKernelValuesPerThread(int threads) {
  int longest = kMaxKernelRow;
  for (const auto& [row, block] : kRowKernelBlocks)
    if (block == threads) longest = row;
  return (longest + threads - 1) / threads;
}

/** `kernel` launched as `launch` plans it, on `s`. */
inline std::vector<mx::array> LaunchKernel(const mx::fast::CustomKernelFunction& kernel,
                                           const KernelLaunch& launch, mx::Stream s) {
  return kernel(launch.inputs, launch.output_shapes, launch.output_dtypes, {launch.threads, 1, 1},
                {launch.per_block, 1, 1}, launch.constants, std::nullopt, false, s);
}

}  // namespace mlx_ep
