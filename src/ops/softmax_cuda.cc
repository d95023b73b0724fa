// (Log)Softmax over a row as one MLX custom CUDA kernel (softmax_cuda.h).
//
// What it computes is what normalization.cc's TranslateSoftmax composes, step for step: the row's
// max (exact in any order), x - max, exp (expf, as MLX's own Exp: MLX compiles custom kernels
// without fast math), the sum of e in float32 and the division (IEEE, no fast math). The float16
// function body rounds x - max, e and the sum to float16 as ONNX's body does; each of those is one
// float32 operation on float16 values rounded once more to float16, which gives the correctly
// rounded float16 result (a float32 difference or quotient of two float16 values never lands on a
// float16 rounding tie it was not already on), as MLX's float16 subtract and divide do. Only the
// sum's order differs from the composed form's (a block's tree here, cuda_block_reduce.h; MLX's
// row reduction there): float32 rounding, below a float16 ulp and within the float32 paths'
// tolerance.
//
// Special values as the composed form: a NaN in the row makes the sum, so the whole row, NaN (the
// block max skips NaN, like fmaxf, but e of it is NaN); +inf in the row, or a row of -inf, gives
// inf - inf = NaN.
//
// Layout: one block a row (RowKernelThreads), thread t holding values t, t + TPB, ... of the row
// in registers (PER <= 16 of them), so x is read once.
#include <climits>
#include <string>

#include "common/env.h"
#include "ops/cuda_block_reduce.h"
#include "ops/fused_gpu_internal.h"
#include "ops/softmax_cuda.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr const char* kHeader = R"(
namespace mlx_ep_softmax {

template <typename T>
__device__ __forceinline__ float rounded(float v) { return static_cast<float>(static_cast<T>(v)); }

template <int N, int TPB, bool LOG, bool BODY16, typename T>
__device__ void row_softmax(const T* x, T* y) {
  static_assert(!(LOG && BODY16), "the float16 body is Softmax's");
  constexpr int PER = (N + TPB - 1) / TPB;
  __shared__ float partial[TPB / 32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  const float lowest = -__int_as_float(0x7f800000);
  float v[PER];
  float local_max = lowest;
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * TPB;
    v[k] = i < N ? static_cast<float>(x[row * N + i]) : lowest;
    local_max = fmaxf(local_max, v[k]);
  }
  const float m = mlx_ep_cuda::block_reduce<true>(local_max, partial);
  float local_sum = 0.f;
  for (int k = 0; k < PER; ++k) {
    if (tid + k * TPB >= N) continue;
    float shifted = __fsub_rn(v[k], m);
    if constexpr (BODY16) shifted = rounded<T>(shifted);
    float e = expf(shifted);
    if constexpr (BODY16) e = rounded<T>(e);
    v[k] = LOG ? shifted : e;
    local_sum += e;
  }
  float total = mlx_ep_cuda::block_reduce<false>(local_sum, partial);
  if constexpr (BODY16) total = rounded<T>(total);
  const float log_total = LOG ? logf(total) : 0.f;
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * TPB;
    if (i < N) y[row * N + i] = static_cast<T>(LOG ? __fsub_rn(v[k], log_total) : v[k] / total);
  }
}

}  // namespace mlx_ep_softmax
)";

// The body MLX's cuda_kernel wraps: input x, output y.
constexpr const char* kSource = R"(
  mlx_ep_softmax::row_softmax<N, TPB, LOG, BODY16>(x, y);
)";

const std::string& Header() {
  static const std::string text = std::string(kBlockReduceSource) + kHeader;
  return text;
}

const mx::fast::CustomKernelFunction& SoftmaxKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_row_softmax", {"x"}, {"y"}, kSource, Header(), /*ensure_row_contiguous=*/true);
  return kernel;
}

}  // namespace

std::optional<RowKernelLaunch> PlanRowSoftmax(const RowSoftmaxInputs& in) {
  const mx::array& x = in.x;
  if (x.ndim() == 0 || x.size() == 0 || !IsCudaKernelFloat(x.dtype())) return std::nullopt;
  if (in.float16_body && (in.log || x.dtype() != mx::float16)) return std::nullopt;
  const int n = x.shape(-1);
  if (n < 1 || n > kMaxKernelRow) return std::nullopt;
  const int tpb = RowKernelThreads(n);
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  if (rows * tpb > INT_MAX) return std::nullopt;
  RowKernelLaunch launch;
  launch.inputs = {x};
  launch.output_shapes = {x.shape()};
  launch.output_dtypes = {x.dtype()};
  launch.threads = static_cast<int>(rows * tpb);
  launch.per_block = tpb;
  launch.constants = {{"N", n}, {"TPB", tpb}, {"LOG", in.log}, {"BODY16", in.float16_body}};
  return launch;
}

bool RowSoftmaxKernelWanted(mx::Stream s) {
  // Opt-in until a GPU has run it: its text passes NVRTC and the host emulation
  // (tests/cpp/softmax_kernel_test.cc); the GPU parity files and the A/B are the next lease's.
  static const bool enabled = EnvFlag(env::kSoftmaxKernel);
  return enabled && UseFusedGpuPaths() && CudaKernelsAvailable(s);
}

std::optional<mx::array> RowSoftmaxByKernel(const RowSoftmaxInputs& in, mx::Stream s) {
  if (!RowSoftmaxKernelWanted(s)) return std::nullopt;
  std::optional<RowKernelLaunch> plan = PlanRowSoftmax(in);
  if (!plan) return std::nullopt;
  return LaunchRowKernel(SoftmaxKernel(), *plan, s)[0];
}

const char* RowSoftmaxKernelSourceForTests() {
  static const std::string text = Header() + "\n// kernel body:\n" + kSource;
  return text.c_str();
}

}  // namespace mlx_ep
