// A few rows times a row-major constant weight as one custom CUDA kernel (matmul_rows_cuda.h).
#include "ops/matmul_rows_cuda.h"

#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/fused_gpu_internal.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kWarp = 32;
constexpr int kThreadsPerBlock = 256;

constexpr const char* kHeader = R"(
namespace mlx_ep_rows {
// VEC values of T in one 16-byte load.
template <typename T, int VEC>
struct alignas(16) Chunk {
  T v[VEC];
};

// acc[r] += x[r, k] * wr[k] over lane `lane`'s k, for x's ROWS rows of K values. ROWS is a
// constant so that a step's loads, w's and every row's, are issued before its sums: with the rows
// read at run time each row's load sat behind a branch (`if (r >= rows) break`), one load of a
// warp in flight (the PTX), and a batch-8 step took 7.09 ms against cuBLASLt's 6.08 (thirty-
// fourth session's H100, one round), where with ROWS a constant the kernel had won (5.07 / 4.55
// against 6.25 / 7.43, thirty-third). `wide`: 16-byte loads (K a whole number of them, x and w
// 16-byte aligned), one value a lane otherwise.
template <int ROWS, typename T>
__device__ __forceinline__ void add_products(const T* x, const T* wr, int K, int lane, bool wide, float* acc) {
  constexpr int kWarp = 32;
  constexpr int VEC = 16 / sizeof(T);
  if (wide) {
    using C = Chunk<T, VEC>;
#pragma unroll 4
    for (int k = lane * VEC; k < K; k += kWarp * VEC) {
      const C wv = *reinterpret_cast<const C*>(wr + k);
      C xv[ROWS];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) xv[r] = *reinterpret_cast<const C*>(x + static_cast<int64_t>(r) * K + k);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[r] += static_cast<float>(xv[r].v[v]) * static_cast<float>(wv.v[v]);
    }
  } else {
#pragma unroll 4
    for (int k = lane; k < K; k += kWarp) {
      const float wk = static_cast<float>(wr[k]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) acc[r] += static_cast<float>(x[static_cast<int64_t>(r) * K + k]) * wk;
    }
  }
}

// add_products for `rows` (1 ... MAX_ROWS, the same for the whole launch): one instance a row
// count in the one compiled kernel.
template <int ROWS, int MAX_ROWS, typename T>
__device__ __forceinline__ void add_products_of(int rows, const T* x, const T* wr, int K, int lane, bool wide,
                                                float* acc) {
  if constexpr (ROWS < MAX_ROWS) {
    if (rows != ROWS) return add_products_of<ROWS + 1, MAX_ROWS>(rows, x, wr, K, lane, wide, acc);
  }
  add_products<ROWS>(x, wr, K, lane, wide, acc);
}
}  // namespace mlx_ep_rows
)";

// A warp per output column `col` (w's row): lane l reads w[col, k] for its k, x's rows at the same
// k, and keeps a float32 sum a row; the warp's shuffles add the lanes' sums and lane r writes row
// r's value, rounded once to T (+ bias[col] in float32 first). K, N and the rows are read from the
// shapes at run time, not made constants: MLX compiles a custom kernel once per process and set of
// constants (NVRTC, no disk cache: mlx/backend/cuda/custom_kernel.cpp), ~1 s each, and a TinyLlama
// batch-8 step's five (K, N) pairs cost its first run 4-5 s more than without the kernel (thirty-
// third session); the row count picks one of MAX_ROWS instances of the loop (add_products_of).
// 16-byte loads of w and x where K is a whole number of 16-byte pieces and both start 16-byte
// aligned (x may be a view at any offset), one value a lane otherwise.
constexpr const char* kBody = R"(
  constexpr int kWarp = 32;
  constexpr int VEC = 16 / sizeof(T);
  const int N = w_shape[0], K = w_shape[1];
  int rows = 1;
  for (int d = 0; d + 1 < x_ndim; ++d) rows *= x_shape[d];
  const int lane = threadIdx.x & (kWarp - 1);
  const int64_t col = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (col >= N || rows < 1 || rows > MAX_ROWS) return;
  float acc[MAX_ROWS];
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r) acc[r] = 0.f;
  const unsigned long long addresses =
      reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(w);
  const bool wide = K % VEC == 0 && (addresses & 15ull) == 0;
  mlx_ep_rows::add_products_of<1, MAX_ROWS>(rows, x, w + col * K, K, lane, wide, acc);
  const float b = HAS_BIAS ? static_cast<float>(bias[col]) : 0.f;
#pragma unroll
  for (int r = 0; r < MAX_ROWS; ++r) {
    if (r >= rows) break;  // the same for every lane: the shuffles see the whole warp
#pragma unroll
    for (int o = kWarp / 2; o > 0; o /= 2) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane == r) y[static_cast<int64_t>(r) * N + col] = static_cast<T>(acc[r] + b);
  }
)";

const mx::fast::CustomKernelFunction& RowsKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_rows_product", {"x", "w", "bias"}, {"y"}, kBody, kHeader, /*ensure_row_contiguous=*/true);
  return kernel;
}

/** The fewest rows the kernel takes (0: off). Opt-in until its GPU parity is whole: "1" from two
 *  rows (one row stays MLX's gemv), "all" from one (an A/B of the kernel against MLX's gemv). */
int RowsKernelLeastRows() {
  static const int least = EnvString(env::kRowsKernel) == "all" ? 1 : EnvFlag(env::kRowsKernel) ? 2 : 0;
  return UseFusedGpuPaths() ? least : 0;
}

}  // namespace

std::optional<KernelLaunch> PlanRowsProduct(const mx::array& x, const mx::array& w,
                                            const std::optional<mx::array>& bias) {
  const mx::Dtype t = x.dtype();
  if (!IsCudaKernelFloat(t) || w.dtype() != t || w.ndim() != 2 || x.ndim() < 1) return std::nullopt;
  const int N = w.shape(0), K = w.shape(1);
  if (K < 1 || N < 1 || x.shape(-1) != K) return std::nullopt;
  const int64_t rows = static_cast<int64_t>(x.size()) / K;
  if (rows < 1 || rows > kRowsProductMaxRows) return std::nullopt;
  if (bias && (bias->dtype() != t || bias->shape() != mx::Shape{N})) return std::nullopt;
  const std::optional<int> threads = WholeBlocks(static_cast<int64_t>(N) * kWarp, kThreadsPerBlock);
  if (!threads) return std::nullopt;
  mx::Shape out = x.shape();
  out.back() = N;
  KernelLaunch plan;
  plan.inputs = {x, w, bias ? *bias : w};  // no bias: w in its place, never read
  plan.output_shapes = {out};
  plan.output_dtypes = {t};
  plan.threads = *threads;
  plan.per_block = kThreadsPerBlock;
  // K, N and the rows from the shapes (kBody); MAX_ROWS the same for every launch
  plan.constants = {{"MAX_ROWS", kRowsProductMaxRows}, {"HAS_BIAS", bias.has_value()}, {"T", t}};
  return plan;
}

std::optional<mx::array> RowMajorWeightOf(const mx::array& b) {
  if (b.ndim() != 2 || !b.has_primitive() || std::string_view(b.primitive().name()) != "Transpose")
    return std::nullopt;
  // Named, then cast: MLX's shared library does not export its primitives' typeinfo.
  if (static_cast<const mx::Transpose&>(b.primitive()).state() != std::vector<int>{1, 0}) return std::nullopt;
  const mx::array& w = b.inputs().at(0);
  if (w.ndim() != 2 || w.has_primitive() || !w.is_available() || !w.flags().row_contiguous)
    return std::nullopt;
  if (w.shape(0) != b.shape(1) || w.shape(1) != b.shape(0)) return std::nullopt;
  return w;
}

std::optional<mx::array> RowsProductByKernel(const mx::array& x, const mx::array& b,
                                             const std::optional<mx::array>& bias, mx::Stream s) {
  const int least = RowsKernelLeastRows();
  if (!least || !CudaKernelsAvailable(s)) return std::nullopt;
  const std::optional<mx::array> w = RowMajorWeightOf(b);
  if (!w) return std::nullopt;
  const std::optional<KernelLaunch> plan = PlanRowsProduct(x, *w, bias);
  if (!plan || static_cast<int64_t>(x.size()) / x.shape(-1) < least) return std::nullopt;  // K >= 1: planned
  return LaunchKernel(RowsKernel(), *plan, s)[0];
}

std::string RowsProductSourceForTests() { return std::string(kHeader) + "\n// kernel body:\n" + kBody; }

}  // namespace mlx_ep
