// The row normalization kernel (row_norm_cuda.h), an MLX custom CUDA kernel
// (mx::fast::cuda_kernel): one block of 256 threads per row. Each thread takes the columns
// threadIdx.x, + 256, ...; sums are a warp shuffle tree, then the 8 warps' partials in order.
//
// Numerics, as ORT's CPU kernels (contrib_ops/cpu/skip_layer_norm.cc, layer_norm_impl.cc) compute:
// s = x + skip, then + bias, in float32 from any input type; mean = sum(s) / n, then
// var = sum((s - mean)^2) / n (two passes, no cancellation; the simplified form: mean 0,
// var = sum(s^2) / n); y = (s - mean) / sqrt(var + eps) * gamma + beta in float32, rounded once
// to y's type; s rounded once to the sum's type. s is recomputed from the inputs in each pass
// (the same float32 operations, so the same value) rather than kept: a row is read three times,
// from the cache. The blocked sums are closer to the exact sum than ORT's one chain is.
//
// The kernel's source depends on the output types only (template arguments): sizes come from the
// shapes, the flags and epsilon from a small int32 input, so MLX compiles it once per type pair.
#include "ops/row_norm_cuda.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "mlx/primitives.h"  // Primitive::name()
#include "ops/fused_gpu_internal.h"

namespace mlx_ep {
namespace {

constexpr int kThreads = 256;

constexpr const char* kHeader = R"(
namespace mlx_ep_norm {

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), the same in every
// thread; partials is the block's shared scratch of 32 floats.
__device__ inline float block_sum(float v, float* partials) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
  __syncthreads();  // the previous call's partials are read by every thread before they change
  if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < blockDim.x / 32; ++w) total += partials[w];
  return total;
}

}  // namespace mlx_ep_norm
)";

/** Inputs x, skip, gamma, beta, bias, params; outputs y, sum; template arguments OutT, SumT and
 *  XT, SkipT (the types x and skip have in the node, which the arrays read may be wider than). */
constexpr const char* kSource = R"(
  __shared__ float partials[32];
  const int row = blockIdx.x;
  if (row >= x_shape[0]) return;  // whole blocks leave
  const int n = x_shape[1];
  const bool simplified = params[0] != 0, has_skip = params[1] != 0, has_bias = params[2] != 0;
  const bool has_beta = params[3] != 0, want_sum = params[5] != 0;
  const float eps = __int_as_float(params[4]);
  const long long base = static_cast<long long>(row) * n;
  const long long skip_base = static_cast<long long>(row % skip_shape[0]) * n;
  auto value = [&](int i) {  // x and skip rounded to their ONNX types first (see Unconverted)
    float v = static_cast<float>(static_cast<XT>(x[base + i]));
    if (has_skip) v += static_cast<float>(static_cast<SkipT>(skip[skip_base + i]));
    if (has_bias) v += static_cast<float>(bias[i]);
    return v;
  };
  float mean = 0.f;
  if (!simplified) {
    float part = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) part += value(i);
    mean = mlx_ep_norm::block_sum(part, partials) / n;
  }
  float part = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float d = value(i) - mean;
    part += d * d;
  }
  const float std_dev = sqrtf(mlx_ep_norm::block_sum(part, partials) / n + eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = value(i);
    float y_i = (v - mean) / std_dev * static_cast<float>(gamma[i]);
    if (has_beta) y_i += static_cast<float>(beta[i]);
    y[base + i] = static_cast<OutT>(y_i);
    if (want_sum) sum[base + i] = static_cast<SumT>(v);
  }
)";

const mx::fast::CustomKernelFunction& Kernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_row_norm", {"x", "skip", "gamma", "beta", "bias", "params"}, {"y", "sum"},
                            kSource, kHeader, /*ensure_row_contiguous=*/true);
  return kernel;
}

/** The array an AsType between float types made `a` from (with `a`'s type), else `a`: the kernel
 *  rounds what it reads to that type itself (the same rounding as the cast), so a float32 result
 *  cast to float16 just before (MatMulNBits' quantized GEMM, whose output cast a composed sum
 *  would have fused) costs no kernel of its own. */
std::pair<mx::array, mx::Dtype> Unconverted(const mx::array& a) {
  // By name: libmlx exports no typeinfo for its primitives. One side float32, so that the
  // kernel's cast is one the CUDA types have (float16 <-> bfloat16 is not).
  const auto is_half = [](mx::Dtype t) { return t == mx::float16 || t == mx::bfloat16; };
  if (!a.has_primitive() || std::string(a.primitive().name()) != "AsType" || a.inputs().size() != 1) return {a, a.dtype()};
  const mx::Dtype from = a.inputs()[0].dtype(), to = a.dtype();
  if ((from == mx::float32 && is_half(to)) || (is_half(from) && to == mx::float32)) return {a.inputs()[0], to};
  return {a, a.dtype()};
}

std::pair<mx::array, mx::array> Launch(const RowNormInputs& in, mx::Dtype y_type, bool want_sum,
                                       mx::Dtype sum_type, mx::Stream s) {
  const int n = in.x.shape(-1), rows = static_cast<int>(in.x.size() / n);
  int32_t eps_bits;
  std::memcpy(&eps_bits, &in.eps, sizeof eps_bits);
  const std::vector<int32_t> flags = {in.simplified, in.skip.has_value(), in.bias.has_value(),
                                      in.beta.has_value(), eps_bits, want_sum};
  const mx::array params(flags.begin(), {static_cast<int>(flags.size())}, mx::int32);
  auto vector = [&](const mx::array& v) { return mx::reshape(v, {n}, s); };
  const auto [x_read, x_type] = Unconverted(in.x);
  const mx::array x = mx::reshape(x_read, {rows, n}, s);
  // Absent inputs are stand-ins the flags keep the kernel from reading.
  const auto [skip_read, skip_type] = in.skip ? Unconverted(*in.skip) : std::pair{x, x_type};
  const mx::array skip = mx::reshape(skip_read, {-1, n}, s);
  const mx::array gamma = vector(in.gamma);
  const mx::array beta = in.beta ? vector(*in.beta) : gamma, bias = in.bias ? vector(*in.bias) : gamma;
  const std::vector<std::pair<std::string, mx::fast::TemplateArg>> types = {
      {"OutT", y_type}, {"SumT", sum_type}, {"XT", x_type}, {"SkipT", skip_type}};
  std::vector<mx::array> outs =
      Kernel()({x, skip, gamma, beta, bias, params}, {x.shape(), want_sum ? x.shape() : mx::Shape{1}},
               {y_type, sum_type}, {rows * kThreads, 1, 1}, {kThreads, 1, 1}, types, std::nullopt, false, s);
  return {mx::reshape(outs[0], in.x.shape(), s), want_sum ? mx::reshape(outs[1], in.x.shape(), s) : outs[1]};
}

/** The kernel against composed MLX ops on a small problem with every input and both forms: ""
 *  when it builds and agrees, else why not (see CheckedOnce). */
std::string SelfCheck(mx::Stream s) {
  const int n = 300;  // more columns than threads: the strided loops wrap
  const mx::array columns = mx::arange(static_cast<double>(n), mx::float32, s);
  const mx::array x = mx::sin(mx::reshape(mx::arange(3.0 * n, mx::float32, s), {3, n}, s), s);
  const mx::array gamma = mx::add(mx::multiply(mx::sin(columns, s), mx::array(0.5f), s), mx::array(1.f), s);
  const mx::array cosines = mx::cos(columns, s);
  const std::optional<mx::array> skip = mx::reshape(cosines, {1, n}, s), beta = cosines,
                                 bias = mx::multiply(cosines, cosines, s);
  float worst = 0.f;
  for (bool simplified : {false, true}) {
    auto [y, sum] = Launch({x, skip, gamma, beta, bias, 1e-5f, simplified}, mx::float32, true, mx::float32, s);
    const mx::array sum_ref = mx::add(mx::add(x, *skip, s), *bias, s);
    const mx::array mean = simplified ? mx::array(0.f) : mx::mean(sum_ref, -1, true, s);
    const mx::array centered = mx::subtract(sum_ref, mean, s);
    const mx::array var = mx::mean(mx::multiply(centered, centered, s), -1, true, s);
    const mx::array y_ref = mx::add(
        mx::multiply(mx::divide(centered, mx::sqrt(mx::add(var, mx::array(1e-5f), s), s), s), gamma, s), *beta, s);
    for (const auto& [got, want] : {std::pair{y, y_ref}, std::pair{sum, sum_ref}})
      worst = std::max(worst, mx::max(mx::abs(mx::subtract(got, want, s), s), s).item<float>());
  }
  return worst < 1e-4f ? "" : "the row normalization kernel differs by " + std::to_string(worst) + " on its check";
}

}  // namespace

std::optional<std::pair<mx::array, mx::array>> RowNormKernel(const RowNormInputs& in, mx::Dtype y_type,
                                                             bool want_sum, mx::Dtype sum_type, mx::Stream s) {
  if (in.x.ndim() == 0 || in.x.size() == 0) return std::nullopt;
  const size_t n = in.x.shape(-1);
  auto holds_n = [&](const std::optional<mx::array>& v) { return !v || v->size() == n; };
  if (!holds_n(in.gamma) || !holds_n(in.beta) || !holds_n(in.bias)) return std::nullopt;
  if (in.skip && (in.skip->shape(-1) != in.x.shape(-1) || in.skip->size() == 0 ||
                  (in.x.size() / n) % (in.skip->size() / n) != 0))
    return std::nullopt;
  if (in.x.size() / n > static_cast<size_t>(std::numeric_limits<int>::max() / kThreads)) return std::nullopt;
  if (!CudaKernelsRun(s) || !CheckedOnce("the row normalization kernel", [s] { return SelfCheck(s); }).empty())
    return std::nullopt;
  return Launch(in, y_type, want_sum, sum_type, s);
}

}  // namespace mlx_ep
