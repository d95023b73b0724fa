// A product of a few rows by a constant weight as one custom CUDA kernel of the EP's
// (matmul_rows_cuda.cc; opt-in ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1): x [..., K] with 2 to 8 rows (1 to 8
// with =all, an A/B against MLX's gemv) times w, the weight held as [N, K] row-major (a MatMul's or a
// transB=0 Gemm's B in the layout of weight_layout.h: graphs with a KV-cache attention op; a
// transB=1 Gemm's B as stored), plus an optional bias [N] (a MatMul's Add, a Gemm's C). A warp per
// output column reads w's row once, 16 bytes a lane where aligned, and keeps each of x's rows' sum
// in float32; the output is rounded once to T. K, N and the rows are read at run time: one
// compiled kernel a dtype and bias.
//
// Why: MLX takes its gemv kernel for one row only (mlx/backend/cuda/matmul.cpp, can_use_gemv:
// M == 1); a batch-8 decode step's 89 products go to cuBLASLt, which costs ~18 us of host time a
// call (a descriptor and a heuristic query each time; 6.2 us for MLX's gemv, 4.2 for a custom
// kernel: thirteenth session), so a TinyLlama fp16 step at batch 8 took 6.11 ms against batch
// 1's 4.11 on the thirty-second session's H100.
#pragma once

#include <optional>

#include "ops/cuda_rows.h"
#include "ops/op.h"

namespace mlx_ep {

/** The most rows of x the kernel takes (a batch-8 decode step); one row stays MLX's gemv unless
 *  ONNXRUNTIME_EP_MLX_ROWS_KERNEL=all. */
constexpr int kRowsProductMaxRows = 8;

/** The launch on any device (a test's view): x [..., K] of 1..kRowsProductMaxRows rows, w [N, K]
 *  and bias [N] (when given) of x's float type; nullopt otherwise. */
std::optional<KernelLaunch> PlanRowsProduct(const mx::array& x, const mx::array& w,
                                            const std::optional<mx::array>& bias);

/** The [N, K] constant behind b when b is the [K, N] transposed view of an evaluated row-major
 *  array (ConstantView's gemv layout, before the trace's constant folding), else nullopt. */
std::optional<mx::array> RowMajorWeightOf(const mx::array& b);

/** x @ b (+ bias) [..., N] by the kernel: ONNXRUNTIME_EP_MLX_ROWS_KERNEL=1 (2 rows or more; =all:
 *  1 or more), MLX's CUDA backend on `s`, b a gemv-layout constant (RowMajorWeightOf) and
 *  PlanRowsProduct's shapes; else nullopt. */
std::optional<mx::array> RowsProductByKernel(const mx::array& x, const mx::array& b,
                                             const std::optional<mx::array>& bias, mx::Stream s);

/** The kernel's device code as NVRTC compiles it ("// kernel body:", then the body). */
std::string RowsProductSourceForTests();

}  // namespace mlx_ep
