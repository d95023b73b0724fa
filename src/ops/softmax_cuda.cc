// The float16 Softmax function-body kernel (softmax_cuda.h), an MLX custom CUDA kernel: one warp
// per row, lane l taking the columns l, l + 32, ...; the row's max and sum are warp shuffle trees.
//
// Each step as the composed body computes it (normalization.cc's SoftmaxFunctionBody): the max
// (a NaN anywhere makes it NaN, as MLX's max does; the row is NaN either way, through the sum);
// x - max rounded to float16 (exact in float32 first, so the one rounding of a float16
// subtraction); exp in float32 of that, rounded to float16; the sum of those in float32, rounded
// to float16; the quotient in float32 rounded to float16. Only the sum's order differs from the
// composed form's (a blocked tree against MLX's reduction), before its rounding to float16.
#include "ops/softmax_cuda.h"

#include <limits>
#include <string>

#include "ops/fused_gpu_internal.h"

namespace mlx_ep {
namespace {

constexpr int kWarp = 32;
constexpr int kThreadsPerBlock = 256;

/** Inputs x [rows, n] float16; output y, the same. */
constexpr const char* kSource = R"(
  const long long row = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= x_shape[0]) return;  // whole warps leave
  const int n = x_shape[1];
  const __half* in = x + row * n;
  float m = -inf;
  for (int i = lane; i < n; i += 32) {
    const float v = __half2float(in[i]);
    m = (v > m || v != v) ? v : m;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffff, m, offset);
    m = (other > m || other != other) ? other : m;
  }
  auto exp_of = [&](int i) {
    const float shifted = __half2float(__float2half(__half2float(in[i]) - m));
    return __half2float(__float2half(expf(shifted)));
  };
  float sum = 0.f;
  for (int i = lane; i < n; i += 32) sum += exp_of(i);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
  const float total = __half2float(__float2half(sum));
  for (int i = lane; i < n; i += 32) y[row * n + i] = __float2half(exp_of(i) / total);
)";

const mx::fast::CustomKernelFunction& Kernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_softmax_f16_body", {"x"}, {"y"}, kSource, "", /*ensure_row_contiguous=*/true);
  return kernel;
}

mx::array Launch(const mx::array& x, mx::Stream s) {
  const int n = x.shape(-1), rows = static_cast<int>(x.size() / n);
  const mx::array x2 = mx::reshape(x, {rows, n}, s);
  const std::vector<mx::array> y = Kernel()({x2}, {x2.shape()}, {mx::float16}, {rows * kWarp, 1, 1},
                                            {kThreadsPerBlock, 1, 1}, {}, std::nullopt, false, s);
  return mx::reshape(y[0], x.shape(), s);
}

/** The kernel against the composed function body on rows longer than a warp, with a masked
 *  (very negative) column: "" when it builds and agrees to a float16 ulp, else why not. */
std::string SelfCheck(mx::Stream s) {
  const mx::array x = mx::astype(
      mx::multiply(mx::sin(mx::reshape(mx::arange(3.0 * 70, mx::float32, s), {3, 70}, s), s), mx::array(6.f), s),
      mx::float16, s);
  const mx::array masked = mx::concatenate({x, mx::full({3, 1}, mx::array(-60000.f, mx::float16), s)}, 1, s);
  const mx::array shifted = mx::subtract(masked, mx::max(masked, -1, true, s), s);
  const mx::array e = mx::astype(mx::exp(mx::astype(shifted, mx::float32, s), s), mx::float16, s);
  const mx::array sum = mx::astype(mx::sum(mx::astype(e, mx::float32, s), -1, true, s), mx::float16, s);
  const mx::array want = mx::astype(mx::divide(e, sum, s), mx::float32, s);
  const mx::array got = mx::astype(Launch(masked, s), mx::float32, s);
  const float worst = mx::max(mx::abs(mx::subtract(got, want, s), s), s).item<float>();
  return worst <= 1e-3f ? "" : "the float16 softmax kernel differs by " + std::to_string(worst) + " on its check";
}

}  // namespace

std::optional<mx::array> SoftmaxBodyKernel(const mx::array& x, mx::Stream s) {
  if (x.dtype() != mx::float16 || x.ndim() == 0 || x.size() == 0 || x.shape(-1) == 0) return std::nullopt;
  if (x.size() / x.shape(-1) > static_cast<size_t>(std::numeric_limits<int>::max() / kWarp)) return std::nullopt;
  if (!CudaKernelsRun(s) || !CheckedOnce("the float16 softmax kernel", [s] { return SelfCheck(s); }).empty())
    return std::nullopt;
  return Launch(x, s);
}

}  // namespace mlx_ep
