// MatMulNBits on MLX's CPU device: a custom MLX primitive (quantized_cpu.cc) whose kernels
// (quantized_cpu_kernels.cc) read ORT's packed weights in place. Used by quantized.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "ops/op.h"

namespace mlx_ep {
namespace nbits_cpu {

/** The attributes of one MatMulNBits node that its kernel needs. */
struct NBitsShape {
  int K = 0;            ///< logical K (A's last dimension)
  int N = 0;            ///< output columns
  int bits = 4;         ///< 2, 4 or 8
  int block_size = 0;   ///< a power of 2 >= 16
  int k_blocks = 0;     ///< ceil(K / block_size)
  bool int8_a = false;  ///< accuracy_level 4: A quantized to int8 per block as ORT's MLAS CompInt8
  bool operator==(const NBitsShape&) const = default;
};

/** One GEMM for the kernels: y [M, N] = x [M, padded K] @ dequantize(b)^T (+ bias). */
struct Problem {
  NBitsShape shape;
  int M = 0;
  int padded_k = 0;                    ///< k_blocks * block_size: x's row stride
  const float* x = nullptr;            ///< [M, padded_k] as PrepareX leaves it
  const uint8_t* b = nullptr;          ///< [N, k_blocks, block_size * bits / 8], ORT's packing
  const float* scales = nullptr;       ///< [N, k_blocks]
  const uint8_t* zp_packed = nullptr;  ///< [N, zp_row_bytes] packed like B, or null
  int zp_row_bytes = 0;
  const float* zp_float = nullptr;  ///< [N, k_blocks] (bits 4 only), or null
  const float* bias = nullptr;      ///< [N] or null
  float* y = nullptr;               ///< [M, N]
  // int8_a only: A quantized per block (QuantizeA).
  const int8_t* qa = nullptr;       ///< [M, padded_k]
  const float* a_scale = nullptr;   ///< [M, k_blocks]: amax / 127
  const float* a_blksum = nullptr;  ///< [M, k_blocks]: a_scale * sum(qa) of the block
  const int8_t* qa_vnni = nullptr;  ///< AVX-512 VNNI, 4 bits: qa per 128 values, 64 evens then 64 odds
  int qa_vnni_stride = 0;           ///< its row length (a multiple of 128, zeros past padded_k)
};

/** Rows of A up to which the kernels (RunColumns) read B in place; more rows (accuracy_level 4
 *  aside) take a BLAS GEMM on panels of dequantized columns (PanelGemm). */
constexpr int kKernelMaxRows = 16;

/** Points p.x at the layout the kernels read (in `buffer` when it differs from x): rows padded
 *  with zeros to padded_k and, for the AVX-512 4-bit kernel (not for `plain`: the GEMM's), each 32
 *  values as evens then odds. */
void PrepareX(Problem& p, std::vector<float>& buffer, bool plain = false);

/** Buffers of the int8 form of A (accuracy_level 4). */
struct Int8A {
  std::vector<int8_t> qa, qa_vnni;
  std::vector<float> a_scale, a_blksum;
};

/** Quantizes p.x into `a` (QuantizeA, plus the VNNI order when RunColumns uses it) and points p at it. */
void PrepareInt8A(Problem& p, Int8A& a);

/** Writes w [n1 - n0, padded_k]: columns n0 .. n1 - 1 of B dequantized as ORT does (p.x and p.y unused). */
void DequantizeRows(const Problem& p, int n0, int n1, float* w);

/** Computes columns [n0, n1) of p.y with the widest instruction set this CPU has. */
void RunColumns(const Problem& p, int n0, int n1);

/** Quantizes rows of x [M, padded_k] to int8 per block as MLAS's QuantizeARow_CompInt8 does:
 *  scale = amax / 127, q = round-half-even(a * (127 / amax)) (0 when amax is 0). */
void QuantizeA(const float* x, int M, int padded_k, int block_size, int8_t* qa, float* a_scale,
               float* a_blksum);

/** The name of the kernel set RunColumns uses ("avx512", "avx2" or "scalar"): for logs and tests. */
const char* KernelIsa();

/** Whether MatMulNBits (accuracy_level 0-3) takes more than kKernelMaxRows rows: the BLAS GEMM on
 *  panels needs the EP's OpenBLAS shim (without it quantized.cc dequantizes B whole, Dequantize). */
bool PanelGemmAvailable();

/** fn(0) ... fn(tasks - 1) on the kernels' pool of sleeping workers and the calling thread (one
 *  thread per CPU, ONNXRUNTIME_EP_MLX_BLAS_THREADS): shared with other CPU primitives
 *  (attention_gqa_cpu.cc) so that they do not start threads of their own. */
void RunOnPool(int tasks, const std::function<void(int)>& fn);

/** The threads RunOnPool uses (the caller's included). */
int PoolThreads();

/** Values a row or plane loop touches below which one thread is faster than waking others: the
 *  `min_work` of the CPU primitives' elementwise and row loops (RunRanges). */
inline constexpr int64_t kMinParallelValues = 1 << 16;

/** fn(0) ... fn(tasks - 1): on the pool (RunOnPool) when the step's `work` (multiply-adds, or
 *  values touched) pays for waking workers, at least `min_work`; else in turn on this thread. */
void RunTasks(int tasks, int64_t work, int64_t min_work, const std::function<void(int)>& fn);

/** fn(begin, end) over [0, items) cut into contiguous ranges, one a task, as many tasks as pool
 *  threads but none of fewer than `grain` items (the first range takes them all then), through
 *  RunTasks with `work` and `min_work`; nothing for no items. The CPU primitives' row and plane
 *  loops. */
void RunRanges(int64_t items, int64_t work, int64_t min_work, const std::function<void(int64_t, int64_t)>& fn,
               int64_t grain = 1);

/** dequantize(B) [N, k_blocks * block_size] float32 as one primitive on CPU stream `s` (the
 *  same inputs as MatMulNBits but x and bias): for many rows of A, where a BLAS GEMM wins. */
mx::array Dequantize(const mx::array& b, const mx::array& scales, const std::optional<mx::array>& zero_points,
                     const NBitsShape& shape, mx::Stream s);

/** y = x @ dequantize(B)^T (+ bias) in float32 as one primitive on CPU stream `s`:
 *  x [..., K] float32 (y [..., N]), b uint8 (N * k_blocks * blob values, any shape: read flat),
 *  scales float32 [N, k_blocks], zero points uint8 packed [N, ceil(k_blocks * bits / 8)] or
 *  float32 [N, k_blocks], bias float32 [N]. */
mx::array MatMulNBits(const mx::array& x, const mx::array& b, const mx::array& scales,
                      const std::optional<mx::array>& zero_points, const std::optional<mx::array>& bias,
                      const NBitsShape& shape, mx::Stream s);

}  // namespace nbits_cpu
}  // namespace mlx_ep
