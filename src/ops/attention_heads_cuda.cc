// Softmax(Q K^T scaled + mask) @ V over heads as one custom CUDA kernel (attention_heads_cuda.h).
#include "ops/attention_heads_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/env.h"
#include "mlx/ops.h"
#include "ops/cuda_block_reduce.h"
#include "ops/fused_gpu_internal.h"
#include "ops/primitive_name.h"
#include "ops/softmax_cuda.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadSize = 128;
constexpr size_t kMaxDims = 8;  // the host emulation's Shape and Strides hold 8

constexpr const char* kHeader = R"(
namespace mlx_ep_heads {

template <typename T>
__device__ __forceinline__ float rounded(float v) { return static_cast<float>(static_cast<T>(v)); }

// Where matrix `m` (an index over the leading ndim - 2 dims, row-major) starts in an array of
// these shape and strides.
template <typename S, typename St>
__device__ __forceinline__ int64_t matrix_offset(int64_t m, const S& shape, const St& strides, int ndim) {
  int64_t offset = 0;
  for (int d = ndim - 3; d >= 0; --d) {
    offset += (m % shape[d]) * strides[d];
    m /= shape[d];
  }
  return offset;
}

// Where row `row` of the scores [..., S, S'] (x_shape: the scores' leading dims and S) starts in
// the mask broadcast to them (the mask's dims aligned with the scores' last ones; a dim of 1
// repeats), through the mask's strides: an operand computed in the graph need not be row-major.
template <typename S, typename St>
__device__ __forceinline__ int64_t mask_row_offset(int64_t row, const S& x_shape, int x_ndim, const S& mask_shape,
                                                  const St& mask_strides, int mask_ndim) {
  int64_t offset = 0;
  for (int d = x_ndim - 2, m = mask_ndim - 2; d >= 0 && m >= 0; --d, --m) {
    const int64_t i = row % x_shape[d];
    row /= x_shape[d];
    if (mask_shape[m] != 1) offset += i * mask_strides[m];
  }
  return offset;
}

// After it, lane l holds the warp's sum of part[l] (a reduce-scatter: 31 shuffles for 32 sums,
// where one butterfly a sum takes 160).
__device__ __forceinline__ float warp_sums(float* part, int lane) {
#pragma unroll
  for (int w = 16; w >= 1; w /= 2) {
    const bool upper = (lane & w) != 0;
#pragma unroll
    for (int j = 0; j < 16; ++j) {  // j < w: a constant bound, so that part stays in registers
      if (j >= w) break;
      const float send = upper ? part[j] : part[j + w];
      const float keep = upper ? part[j + w] : part[j];
      part[j] = keep + __shfl_xor_sync(0xffffffffu, send, w);
    }
  }
  return part[0];
}

template <bool MAX>
__device__ __forceinline__ float warp_reduce(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, other) : v + other;
  }
  return v;
}

}  // namespace mlx_ep_heads
)";

// A warp per query row i of matrix m (the leading dims' index): lane l holds Q's values d = l,
// l + 32, ... in float32; for each 32 keys the lanes' partial dots (their d's, loads along d, so
// a key's row is read by the warp at once) are summed by warp_sums, lane l's being key l's score,
// rounded to T, then scaled and masked as the softmax kernel does; the row's softmax from the
// scores in shared memory (P rounded to T), then P @ V with lane l's output values d = l, l + 32,
// ... in float32 (V's rows read along d). Whole warps return together (the shuffles see every
// lane). Constants: T, D, SCALE (0 none, 1 divide, 2 multiply), MASK, BODY16.
constexpr const char* kBody = R"(
  constexpr int kWarp = 32, WARPS = 4, MAX_KEYS = 1024;
  constexpr int DT = (D + kWarp - 1) / kWarp;
  const int nd = q_ndim;
  const int S = q_shape[nd - 2], KEYS = kt_shape[nd - 1];
  int64_t matrices = 1;
  for (int d = 0; d + 2 < nd; ++d) matrices *= q_shape[d];
  const int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (row >= matrices * S) return;
  const int64_t m = row / S;
  const int i = static_cast<int>(row % S);
  const T* qr = q + mlx_ep_heads::matrix_offset(m, q_shape, q_strides, nd) + i * q_strides[nd - 2];
  const T* kb = kt + mlx_ep_heads::matrix_offset(m, kt_shape, kt_strides, nd);
  const T* vb = v + mlx_ep_heads::matrix_offset(m, v_shape, v_strides, nd);
  const int64_t q_d = q_strides[nd - 1], k_d = kt_strides[nd - 2], k_j = kt_strides[nd - 1];
  const int64_t v_j = v_strides[nd - 2], v_d = v_strides[nd - 1];
  float qv[DT];
#pragma unroll
  for (int t = 0; t < DT; ++t) {
    const int d = lane + t * kWarp;
    qv[t] = d < D ? static_cast<float>(qr[d * q_d]) : 0.f;
  }
  const float f = SCALE != 0 ? static_cast<float>(factor[0]) : 1.f;
  const T* mask_row = mask;
  int64_t mask_step = 0;
  if (MASK) {
    mask_row += mlx_ep_heads::mask_row_offset(row, q_shape, nd, mask_shape, mask_strides, mask_ndim);
    mask_step = mask_shape[mask_ndim - 1] != 1 ? mask_strides[mask_ndim - 1] : 0;
  }
  __shared__ float scores[WARPS][MAX_KEYS];
  float* sc = scores[warp];
  for (int base = 0; base < KEYS; base += kWarp) {
    float part[kWarp];
#pragma unroll
    for (int j = 0; j < kWarp; ++j) {
      const int key = base + j < KEYS ? base + j : KEYS - 1;  // past the last: read in bounds, unused
      float acc = 0.f;
#pragma unroll
      for (int t = 0; t < DT; ++t) {
        const int d = lane + t * kWarp;
        if (d < D) acc += qv[t] * static_cast<float>(kb[d * k_d + key * k_j]);
      }
      part[j] = acc;
    }
    const float dot = mlx_ep_heads::warp_sums(part, lane);
    const int key = base + lane;
    if (key < KEYS) {
      float a = mlx_ep_heads::rounded<T>(dot);
      if (SCALE == 1) a = mlx_ep_heads::rounded<T>(__fdiv_rn(a, f));
      if (SCALE == 2) a = mlx_ep_heads::rounded<T>(__fmul_rn(a, f));
      if (MASK) a = mlx_ep_heads::rounded<T>(__fadd_rn(a, static_cast<float>(mask_row[mask_step * key])));
      sc[key] = a;
    }
  }
  __syncwarp();
  float top = mlx_ep_cuda::negative_infinity();
  for (int j = lane; j < KEYS; j += kWarp) top = fmaxf(top, sc[j]);
  top = mlx_ep_heads::warp_reduce<true>(top);
  float sum = 0.f;
  for (int j = lane; j < KEYS; j += kWarp) {
    float shifted = __fsub_rn(sc[j], top);
    if (BODY16) shifted = mlx_ep_heads::rounded<T>(shifted);
    float e = expf(shifted);
    if (BODY16) e = mlx_ep_heads::rounded<T>(e);
    sc[j] = e;
    sum += e;
  }
  float total = mlx_ep_heads::warp_reduce<false>(sum);
  if (BODY16) total = mlx_ep_heads::rounded<T>(total);
  for (int j = lane; j < KEYS; j += kWarp) sc[j] = mlx_ep_heads::rounded<T>(__fdiv_rn(sc[j], total));
  __syncwarp();
  float o[DT];
#pragma unroll
  for (int t = 0; t < DT; ++t) o[t] = 0.f;
#pragma unroll 4
  for (int j = 0; j < KEYS; ++j) {
    const float p = sc[j];
#pragma unroll
    for (int t = 0; t < DT; ++t) {
      const int d = lane + t * kWarp;
      if (d < D) o[t] += p * static_cast<float>(vb[j * v_j + d * v_d]);
    }
  }
#pragma unroll
  for (int t = 0; t < DT; ++t) {
    const int d = lane + t * kWarp;
    if (d < D) out[row * D + d] = static_cast<T>(o[t]);
  }
)";

const std::string& Header() {
  static const std::string text = std::string(kBlockReduceSource) + kHeader;
  return text;
}

const mx::fast::CustomKernelFunction& HeadsKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_heads_attention", {"q", "kt", "v", "factor", "mask"}, {"out"}, kBody,
                            Header(), /*ensure_row_contiguous=*/false);
  return kernel;
}

bool SameLeadingDims(const mx::array& a, const mx::array& b) {
  return a.ndim() == b.ndim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin());
}

}  // namespace

std::optional<KernelLaunch> PlanHeadsAttention(const HeadsAttentionInputs& in, mx::StreamOrDevice s) {
  const mx::Dtype t = in.q.dtype();
  if (!IsCudaKernelFloat(t) || in.kt.dtype() != t || in.v.dtype() != t) return std::nullopt;
  if (in.q.ndim() < 2 || in.q.ndim() > kMaxDims || !SameLeadingDims(in.q, in.kt) ||
      !SameLeadingDims(in.q, in.v))
    return std::nullopt;
  const int S = in.q.shape(-2), D = in.q.shape(-1), keys = in.kt.shape(-1);
  if (D < 1 || D > kMaxHeadSize || in.kt.shape(-2) != D || in.v.shape(-2) != keys || in.v.shape(-1) != D)
    return std::nullopt;
  if (S < 1 || keys < 1 || keys > kHeadsAttentionMaxKeys) return std::nullopt;
  if (in.float16_body && t != mx::float16) return std::nullopt;
  if (in.terms.scale != ScoreTerms::Scale::kNone && (in.factor.size() != 1 || in.factor.dtype() != t))
    return std::nullopt;
  mx::array mask = in.mask;
  if (in.terms.mask) {
    if (mask.dtype() != t || mask.ndim() > in.q.ndim()) return std::nullopt;
    // MLX passes the shapes of arrays of rank > 0 only
    if (mask.ndim() == 0) mask = mx::reshape(mask, {1}, s);
  }
  int64_t rows = static_cast<int64_t>(S);
  for (size_t d = 0; d + 2 < in.q.ndim(); ++d) rows *= in.q.shape(d);
  const std::optional<int> threads = WholeBlocks(rows * kWarp, kWarp * kWarpsPerBlock);
  if (!threads) return std::nullopt;
  mx::Shape out = in.q.shape();
  KernelLaunch plan;
  plan.inputs = {in.q, in.kt, in.v, in.factor, mask};
  plan.output_shapes = {out};
  plan.output_dtypes = {t};
  plan.threads = *threads;
  plan.per_block = kWarp * kWarpsPerBlock;
  plan.constants = {{"D", D},
                    {"SCALE", ScaleConstant(in.terms.scale)},
                    {"MASK", in.terms.mask},
                    {"BODY16", in.float16_body},
                    {"T", t}};
  return plan;
}

std::optional<HeadsAttentionInputs> HeadsAttentionInputsOf(const RowSoftmaxLaunch& softmax,
                                                           const mx::array& p, const mx::array& v) {
  if (softmax.log || softmax.inputs.size() != 3) return std::nullopt;
  const mx::array& scores = softmax.inputs[0];
  if (!IsPrimitive(scores, "Matmul") || scores.inputs().size() != 2) return std::nullopt;
  HeadsAttentionInputs in{scores.inputs()[0], scores.inputs()[1],  v, softmax.inputs[1], softmax.inputs[2],
                          softmax.terms,      softmax.float16_body};
  // P is the scores' softmax: its rows and keys are the product's
  if (p.shape() != scores.shape() || in.q.shape(-2) != p.shape(-2) || in.kt.shape(-1) != p.shape(-1))
    return std::nullopt;
  return in;
}

std::optional<mx::array> HeadsAttentionByKernel(const mx::array& p, const mx::array& v, mx::Stream s) {
  static const bool enabled = EnvFlag(env::kHeadsAttention);
  if (!enabled || !UseFusedGpuPaths() || !CudaKernelsAvailable(s)) return std::nullopt;
  const std::optional<RowSoftmaxLaunch> softmax = RowSoftmaxLaunchOf(p);
  if (!softmax) return std::nullopt;
  const std::optional<HeadsAttentionInputs> in = HeadsAttentionInputsOf(*softmax, p, v);
  if (!in) return std::nullopt;
  const std::optional<KernelLaunch> plan = PlanHeadsAttention(*in, s);
  if (!plan) return std::nullopt;
  return LaunchKernel(HeadsKernel(), *plan, s)[0];
}

const char* HeadsAttentionSourceForTests() {
  static const std::string text = Header() + "\n// kernel body:\n" + kBody;
  return text.c_str();
}

}  // namespace mlx_ep
