// Row normalizations as one MLX custom CUDA kernel (normalization_cuda.h).
//
// Why a kernel of our own: ORT computes float16/bfloat16 norms in float32 and rounds once, so the
// EP fed MLX's fused kernels float32 rows: a float16 SkipSimplifiedLayerNormalization was the
// skip sum with its casts (one compiled kernel), rms_norm, and the cast of y back (copy_v), and
// every launch costs MLX's host ~15 us on a step where the GPU idles more than half the time
// (the kernel timeline of issue 7). This kernel reads x, skip and the weights in their own types
// and writes y (and the sum) in theirs: one launch a norm.
//
// What it computes is what the composed translations compute (normalization.cc,
// normalization_contrib.cc): s = (x + skip) + bias, each widened to float32; the layer form's mean
// refined once (by mean(s - mean)) and its variance the mean of the centered rows' squares, so a
// row whose mean is large against its spread keeps its accuracy (FastLayerNorm's recentering,
// without the extra kernels); y = (s - mean) / sqrt(var + eps) * scale + beta, each operation rounded on its
// own (__fmul_rn / __fadd_rn: no contraction into fused multiply-adds), rounded once to y's type.
// The sums are a block's tree (cuda_block_reduce.h: warp shuffles, then the warps' partials in one
// order), as MLX's own norm kernels sum.
//
// Layout: one block a row, TPB threads, thread t holding values t, t + TPB, ... of the row in
// registers (PER of them, PER <= 16), so x and skip are read once.
#include <climits>
#include <cstring>
#include <string>

#include "common/env.h"
#include "mlx/ops.h"
#include "ops/cuda_block_reduce.h"
#include "ops/fused_gpu_internal.h"
#include "ops/normalization_cuda.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr const char* kHeader = R"(
namespace mlx_ep_norm {

template <int N, int TPB, bool SIMPLIFIED, bool SKIP, bool BIAS, bool BETA, bool SUM, bool ROUND_SUM,
          typename T, typename S, typename B, typename W, typename Z, typename O, typename U>
__device__ void row_norm(const T* x, const S* skip, const B* bias, const W* scale, const Z* beta, O* y,
                         U* sum, float eps) {
  constexpr int PER = (N + TPB - 1) / TPB;
  __shared__ float partial[TPB / 32];
  const int64_t row = blockIdx.x;
  const int tid = threadIdx.x;
  // Up to 8 values a thread the weights are loaded with the row, before the reductions: loads do
  // not move across a __syncthreads, so read after them they add a memory latency to the launch.
  // Past 8 (rows over 2,048 values at 256 threads a block), 1,024-thread blocks would hold more
  // registers than a block may.
  constexpr bool EARLY = PER <= 8;
  constexpr int WPER = EARLY ? PER : 1;
  float v[PER], w[WPER], b[WPER];
  float first = 0.f;
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * TPB;
    v[k] = 0.f;
    if (i >= N) continue;
    if constexpr (EARLY) {
      w[k] = static_cast<float>(scale[i]);
      if constexpr (BETA) b[k] = static_cast<float>(beta[i]);
    }
    float a = static_cast<float>(x[row * N + i]);
    if constexpr (SKIP) a = __fadd_rn(a, static_cast<float>(skip[row * N + i]));
    if constexpr (ROUND_SUM) a = static_cast<float>(static_cast<T>(a));  // an Add node's output
    if constexpr (BIAS) a = __fadd_rn(a, static_cast<float>(bias[i]));
    v[k] = a;
    if constexpr (SUM) sum[row * N + i] = static_cast<U>(a);
    first += SIMPLIFIED ? __fmul_rn(a, a) : a;
  }
  const float n = static_cast<float>(N);
  // The layer form centers in two steps, (s - mean) - refinement: s - mean is exact where they
  // are within a factor of two of each other (Sterbenz), so the mean's own rounding (half an ulp
  // of a row's offset) does not reach y; the refinement is small and nearly exact.
  float mean = 0.f, refinement = 0.f, denom;
  if constexpr (SIMPLIFIED) {
    denom = sqrtf(__fadd_rn(mlx_ep_cuda::block_reduce<false>(first, partial) / n, eps));
  } else {
    mean = mlx_ep_cuda::block_reduce<false>(first, partial) / n;
    float residual = 0.f;
    for (int k = 0; k < PER; ++k)
      if (tid + k * TPB < N) residual += __fsub_rn(v[k], mean);
    refinement = mlx_ep_cuda::block_reduce<false>(residual, partial) / n;
    float squares = 0.f;
    for (int k = 0; k < PER; ++k)
      if (tid + k * TPB < N) {
        const float d = __fsub_rn(__fsub_rn(v[k], mean), refinement);
        squares += __fmul_rn(d, d);
      }
    denom = sqrtf(__fadd_rn(mlx_ep_cuda::block_reduce<false>(squares, partial) / n, eps));
  }
  for (int k = 0; k < PER; ++k) {
    const int i = tid + k * TPB;
    if (i >= N) continue;
    const float centered = SIMPLIFIED ? v[k] : __fsub_rn(__fsub_rn(v[k], mean), refinement);
    float out = __fmul_rn(centered / denom, EARLY ? w[k % WPER] : static_cast<float>(scale[i]));
    if constexpr (BETA) out = __fadd_rn(out, EARLY ? b[k % WPER] : static_cast<float>(beta[i]));
    y[row * N + i] = static_cast<O>(out);
  }
}

}  // namespace mlx_ep_norm
)";

// The bodies MLX's cuda_kernel wraps: inputs x, skip, bias, scale, beta; outputs y (and sum).
constexpr const char* kSource = R"(
  mlx_ep_norm::row_norm<N, TPB, SIMPLIFIED, SKIP, BIAS, BETA, false, ROUND_SUM>(
      x, skip, bias, scale, beta, y, static_cast<float*>(nullptr), __int_as_float(EPS_BITS));
)";
constexpr const char* kSumSource = R"(
  mlx_ep_norm::row_norm<N, TPB, SIMPLIFIED, SKIP, BIAS, BETA, true, ROUND_SUM>(
      x, skip, bias, scale, beta, y, sum, __int_as_float(EPS_BITS));
)";

/** The kernel's header: the shared block reduction, then row_norm. */
const std::string& Header() {
  static const std::string text = std::string(kBlockReduceSource) + kHeader;
  return text;
}

const mx::fast::CustomKernelFunction& NormKernel(bool with_sum) {
  static const mx::fast::CustomKernelFunction plain = mx::fast::cuda_kernel(
      "mlx_ep_row_norm", {"x", "skip", "bias", "scale", "beta"}, {"y"}, kSource, Header(),
      /*ensure_row_contiguous=*/true);
  static const mx::fast::CustomKernelFunction summed =
      mx::fast::cuda_kernel("mlx_ep_row_norm_sum", {"x", "skip", "bias", "scale", "beta"}, {"y", "sum"},
                            kSumSource, Header(), /*ensure_row_contiguous=*/true);
  return with_sum ? summed : plain;
}

}  // namespace

std::optional<KernelLaunch> PlanRowNorm(const RowNormInputs& in) {
  const mx::array& x = in.x;
  if (x.ndim() == 0 || x.size() == 0 || !IsCudaKernelFloat(x.dtype()) || !IsCudaKernelFloat(in.y_dtype))
    return std::nullopt;
  const int n = x.shape(-1);
  if (n < 1 || n > kMaxKernelRow) return std::nullopt;
  auto is_vector = [&](const std::optional<mx::array>& p) {
    return !p || (p->ndim() == 1 && p->shape(0) == n && IsCudaKernelFloat(p->dtype()));
  };
  if (!is_vector(in.scale) || !is_vector(in.bias) || !is_vector(in.beta)) return std::nullopt;
  if (in.simplified && in.beta) return std::nullopt;
  if (in.skip && (in.skip->shape() != x.shape() || in.skip->dtype() != x.dtype())) return std::nullopt;
  const int tpb = RowKernelThreads(n);
  const int64_t rows = static_cast<int64_t>(x.size()) / n;
  if (rows * tpb > INT_MAX) return std::nullopt;

  KernelLaunch launch;
  // Absent inputs: x or scale in their place (never read: SKIP, BIAS, BETA say so).
  launch.inputs = {x, in.skip.value_or(x), in.bias.value_or(in.scale), in.scale, in.beta.value_or(in.scale)};
  launch.output_shapes = {x.shape()};
  launch.output_dtypes = {in.y_dtype};
  if (in.want_sum) {
    launch.output_shapes.push_back(x.shape());
    launch.output_dtypes.push_back(x.dtype());
  }
  launch.threads = static_cast<int>(rows * tpb);
  launch.per_block = tpb;
  int eps_bits = 0;
  std::memcpy(&eps_bits, &in.eps, sizeof eps_bits);
  launch.constants = {{"N", n},
                      {"TPB", tpb},
                      {"SIMPLIFIED", in.simplified},
                      {"SKIP", in.skip.has_value()},
                      {"BIAS", in.bias.has_value()},
                      {"BETA", in.beta.has_value()},
                      {"ROUND_SUM", in.skip.has_value() && in.round_sum},
                      {"EPS_BITS", eps_bits}};
  return launch;
}

bool RowNormKernelWanted(mx::Stream s) {
  // The default since the thirtieth session's H200 (=0: MLX's kernels): 90 fewer primitives a
  // TinyLlama decode step (307 -> 217), whose host encoding took less time in each of four
  // pairings (eval 1.48-1.54 against 1.60-2.27 ms fp16, 2.42-2.64 against 2.69-2.91 int4), and
  // 43 launches of 4.6 us, about the GPU time of the three kernels a norm was before.
  static const bool enabled = !EnvOff(env::kNormKernel);
  return enabled && UseFusedGpuPaths() && CudaKernelsAvailable(s);
}

std::optional<std::vector<mx::array>> RowNormByKernel(const RowNormInputs& in, mx::Stream s) {
  if (!RowNormKernelWanted(s)) return std::nullopt;
  std::optional<KernelLaunch> plan = PlanRowNorm(in);
  if (!plan) return std::nullopt;
  return LaunchKernel(NormKernel(in.want_sum), *plan, s);
}

const char* RowNormKernelSourceForTests() {
  static const std::string text = Header() + "\n// kernel body:\n" + kSource;
  return text.c_str();
}

const char* RowNormSumBodyForTests() { return kSumSource; }

}  // namespace mlx_ep
