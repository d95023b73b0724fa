// Softmax(Q K^T scaled + mask) @ V over heads: the plan and launch of both kernels and the CUDA-core one,
// a warp a query row (attention_heads_cuda.h; the tensor-core one: attention_heads_mma_cuda.cc).
#include "ops/attention_heads_cuda.h"

#include <algorithm>
#include <string>
#include <variant>
#include <vector>

#include "common/env.h"
#include "mlx/ops.h"
#include "ops/attention_heads_cuda_internal.h"
#include "ops/cuda_block_reduce.h"
#include "ops/cuda_score_terms.h"
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

using mlx_ep_scores::rounded;

// After it, lane l holds the sum over its group of W lanes (W a power of 2, at most 32) of
// part[l % W] (a reduce-scatter: W - 1 shuffles for W sums, where one butterfly a sum takes
// W log2 W).
template <int W>
__device__ __forceinline__ float group_sums(float* part, int lane) {
#pragma unroll
  for (int w = W / 2; w >= 1; w /= 2) {
    const bool upper = (lane & w) != 0;
#pragma unroll
    for (int j = 0; j < W / 2; ++j) {  // j < w: a constant bound, so that part stays in registers
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

// The 16-byte vector path: V values of T a load, a group of G lanes (D / V rounded up to a power
// of 2; lanes past D idle) per key's row, 32 / G keys a load instruction.
template <typename T, int D>
struct Vec {
  static constexpr int V = 16 / sizeof(T);
  static constexpr bool OK = D % V == 0;
  static constexpr int G =
      D / V <= 1 ? 1 : D / V <= 2 ? 2 : D / V <= 4 ? 4 : D / V <= 8 ? 8 : D / V <= 16 ? 16 : 32;
  static constexpr int KEYS = 32 / G;
};

// Through the read-only data cache (__ldg): the kernel's inputs are not written while it runs.
template <typename T, int V>
__device__ __forceinline__ void load16(const T* p, float* x) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < V; ++i) x[i] = static_cast<float>(e[i]);
}

template <typename T, int V>
__device__ __forceinline__ void store16(T* p, const float* x) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < V; ++i) e[i] = static_cast<T>(x[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// A key's score as the composed ops round it: the dot rounded to T (MLX's matmul), then scaled
// and masked in T as the softmax kernel does.
template <typename T, int SCALE, bool MASK>
__device__ __forceinline__ float score(float dot, const Terms<T>& terms, int key) {
  return mlx_ep_scores::scaled_masked<T, SCALE, MASK>(rounded<T>(dot), terms.f, terms.mask_row, terms.mask_step, key);
}

// Any layout: lane l holds Q's d = l, l + 32, ...; for each 32 keys the lanes' partial dots (a
// key's row read along d by the warp at once, 2 or 4 bytes a lane) are summed by group_sums,
// lane l's being key base + l's score.
template <typename T, int D, int SCALE, bool MASK>
__device__ void scores_by_lanes(float* sc, const T* qr, int64_t q_d, const T* kb, int64_t k_d, int64_t k_j,
                                int keys, int lane, const Terms<T>& terms) {
  constexpr int DT = (D + 31) / 32;
  float qv[DT];
#pragma unroll
  for (int t = 0; t < DT; ++t) {
    const int d = lane + t * 32;
    qv[t] = d < D ? static_cast<float>(qr[d * q_d]) : 0.f;
  }
  for (int base = 0; base < keys; base += 32) {
    float part[32];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int key = base + j < keys ? base + j : keys - 1;  // past the last: read in bounds, unused
      float acc = 0.f;
#pragma unroll
      for (int t = 0; t < DT; ++t) {
        const int d = lane + t * 32;
        if (d < D) acc += qv[t] * static_cast<float>(kb[d * k_d + key * k_j]);
      }
      part[j] = acc;
    }
    const float dot = group_sums<32>(part, lane);
    if (base + lane < keys) sc[base + lane] = score<T, SCALE, MASK>(dot, terms, base + lane);
  }
}

// K's rows packed and 16-byte aligned (Vec): lane l = k * G + g holds Q's d = g V ... g V + V - 1;
// in step i < G it reads those d's of key base + i KEYS + k (one load) and sums its V products,
// then group_sums over the G lanes leaves lane l the score of key base + g KEYS + k.
template <typename T, int D, int SCALE, bool MASK>
__device__ void scores_by_groups(float* sc, const T* qr, int64_t q_d, const T* kb, int64_t k_j, int keys,
                                 int lane, const Terms<T>& terms) {
  using W = Vec<T, D>;
  const int g = lane % W::G, k = lane / W::G;
  const bool live = g * W::V < D;
  float qv[W::V];
  if (live && q_d == 1 && aligned16(qr + g * W::V)) {
    load16<T, W::V>(qr + g * W::V, qv);
  } else {
#pragma unroll
    for (int e = 0; e < W::V; ++e) qv[e] = live ? static_cast<float>(qr[(g * W::V + e) * q_d]) : 0.f;
  }
  for (int base = 0; base < keys; base += 32) {
    float part[W::G];
#pragma unroll
    for (int i = 0; i < W::G; ++i) {
      const int j = base + i * W::KEYS + k;
      const int key = j < keys ? j : keys - 1;  // past the last: read in bounds, unused
      float kv[W::V], acc = 0.f;
      if (live) {
        load16<T, W::V>(kb + key * k_j + g * W::V, kv);
#pragma unroll
        for (int e = 0; e < W::V; ++e) acc += qv[e] * kv[e];
      }
      part[i] = acc;
    }
    const float dot = group_sums<W::G>(part, lane);
    const int key = base + g * W::KEYS + k;
    if (key < keys) sc[key] = score<T, SCALE, MASK>(dot, terms, key);
  }
}

// Any layout: lane l sums out's d = l, l + 32, ... over the keys (V's rows read along d).
template <typename T, int D>
__device__ void pv_by_lanes(const float* sc, const T* vb, int64_t v_j, int64_t v_d, int keys, int lane,
                            T* out) {
  constexpr int DT = (D + 31) / 32;
  float o[DT];
#pragma unroll
  for (int t = 0; t < DT; ++t) o[t] = 0.f;
#pragma unroll 4
  for (int j = 0; j < keys; ++j) {
    const float p = sc[j];
#pragma unroll
    for (int t = 0; t < DT; ++t) {
      const int d = lane + t * 32;
      if (d < D) o[t] += p * static_cast<float>(vb[j * v_j + d * v_d]);
    }
  }
#pragma unroll
  for (int t = 0; t < DT; ++t) {
    const int d = lane + t * 32;
    if (d < D) out[d] = static_cast<T>(o[t]);
  }
}

// V's rows packed and 16-byte aligned, out too (Vec): lane l = k * G + g sums out's d = g V ...
// g V + V - 1 over keys k, k + KEYS, ... (a load each), the groups' sums added by shuffles.
template <typename T, int D>
__device__ void pv_by_groups(const float* sc, const T* vb, int64_t v_j, int keys, int lane, T* out) {
  using W = Vec<T, D>;
  const int g = lane % W::G, k = lane / W::G;
  const bool live = g * W::V < D;
  float o[W::V];
#pragma unroll
  for (int e = 0; e < W::V; ++e) o[e] = 0.f;
#pragma unroll 4
  for (int j = k; j < keys; j += W::KEYS) {
    const float p = sc[j];
    float x[W::V];
    if (live) {
      load16<T, W::V>(vb + j * v_j + g * W::V, x);
#pragma unroll
      for (int e = 0; e < W::V; ++e) o[e] += p * x[e];
    }
  }
#pragma unroll
  for (int w = W::G; w < 32; w *= 2)
#pragma unroll
    for (int e = 0; e < W::V; ++e) o[e] += __shfl_xor_sync(0xffffffffu, o[e], w);
  if (k == 0 && live) store16<T, W::V>(out + g * W::V, o);
}

}  // namespace mlx_ep_heads
)";

// A warp per query row i of matrix m (the leading dims' index): the row's scores (Q's row dotted
// with K^T's columns in float32, rounded to T, then scaled and masked as the softmax kernel does)
// into shared memory, the row's softmax there (P rounded to T), then P @ V in float32 cast to T.
// The products read 16 bytes a lane (scores_by_groups, pv_by_groups) where K's (V's) rows are
// packed along d, start every V elements and the warp's matrix is 16-byte aligned (a warp-uniform
// choice: strides and pointers are arguments), else 2 or 4 bytes (scores_by_lanes, pv_by_lanes).
// Whole warps return together (the shuffles see every lane). Constants: T, D, SCALE (0 none,
// 1 divide, 2 multiply), MASK, BODY16.
constexpr const char* kBody = R"(
  constexpr int kWarp = 32, WARPS = 4, MAX_KEYS = 1024;
  using Vec = mlx_ep_heads::Vec<T, D>;
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
  const mlx_ep_heads::Terms<T> terms = mlx_ep_heads::row_terms<T, SCALE, MASK>(
      factor, mask, row, q_shape, nd, mask_shape, mask_strides, mask_ndim);
  __shared__ float scores[WARPS][MAX_KEYS];
  float* sc = scores[warp];
  if (Vec::OK && k_d == 1 && k_j % Vec::V == 0 && mlx_ep_heads::aligned16(kb))
    mlx_ep_heads::scores_by_groups<T, D, SCALE, MASK>(sc, qr, q_d, kb, k_j, KEYS, lane, terms);
  else
    mlx_ep_heads::scores_by_lanes<T, D, SCALE, MASK>(sc, qr, q_d, kb, k_d, k_j, KEYS, lane, terms);
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
  T* out_row = out + row * D;
  if (Vec::OK && v_d == 1 && v_j % Vec::V == 0 && mlx_ep_heads::aligned16(vb) &&
      mlx_ep_heads::aligned16(out_row))
    mlx_ep_heads::pv_by_groups<T, D>(sc, vb, v_j, KEYS, lane, out_row);
  else
    mlx_ep_heads::pv_by_lanes<T, D>(sc, vb, v_j, v_d, KEYS, lane, out_row);
)";

const std::string& Header() {
  static const std::string text =
      std::string(kBlockReduceSource) + kScoreTermsSource + kHeadsLayoutSource + kHeader;
  return text;
}

const mx::fast::CustomKernelFunction& HeadsRowsKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_heads_attention", {"q", "kt", "v", "factor", "mask"}, {"out"}, kBody,
                            Header(), /*ensure_row_contiguous=*/false);
  return kernel;
}

// The tensor-core kernel's mma.sync.m16n8k16 needs compute capability 8.0 or later (MLX's CUDA
// backend also runs on 7.x); ONNXRUNTIME_EP_MLX_HEADS_ATTENTION=rows keeps the CUDA-core kernel.
bool TensorCoresWanted(mx::Stream s) {
  if (EnvString(env::kHeadsAttention) == "rows") return false;
  const auto& info = mx::device_info(s.device);
  const auto major = info.find("compute_capability_major");
  return major != info.end() && std::holds_alternative<size_t>(major->second) &&
         std::get<size_t>(major->second) >= 8;
}

bool SameLeadingDims(const mx::array& a, const mx::array& b) {
  return a.ndim() == b.ndim() && std::equal(a.shape().begin(), a.shape().end() - 2, b.shape().begin());
}

}  // namespace

std::optional<KernelLaunch> PlanHeadsAttention(const HeadsAttentionInputs& in, HeadsKernel kernel,
                                               mx::StreamOrDevice s) {
  const mx::Dtype t = in.q.dtype();
  if (!IsCudaKernelFloat(t) || in.kt.dtype() != t || in.v.dtype() != t) return std::nullopt;
  if (kernel == HeadsKernel::kTensorCores && t == mx::float32) return std::nullopt;
  if (in.q.ndim() < 2 || in.q.ndim() > kMaxDims || !SameLeadingDims(in.q, in.kt) ||
      !SameLeadingDims(in.q, in.v))
    return std::nullopt;
  const int S = in.q.shape(-2), D = in.q.shape(-1), keys = in.kt.shape(-1);
  if (D < 1 || D > kMaxHeadSize || in.kt.shape(-2) != D || in.v.shape(-2) != keys || in.v.shape(-1) != D)
    return std::nullopt;
  // the CUDA-core kernel keeps a row's scores in shared memory; the tensor-core one recomputes them
  if (S < 1 || keys < 1 || (kernel == HeadsKernel::kRows && keys > kHeadsAttentionMaxKeys))
    return std::nullopt;
  if (in.float16_body && t != mx::float16) return std::nullopt;
  if (in.terms.scale != ScoreTerms::Scale::kNone && (in.factor.size() != 1 || in.factor.dtype() != t))
    return std::nullopt;
  mx::array mask = in.mask;
  if (in.terms.mask) {
    if (mask.dtype() != t || mask.ndim() > in.q.ndim()) return std::nullopt;
    // MLX passes the shapes of arrays of rank > 0 only
    if (mask.ndim() == 0) mask = mx::reshape(mask, {1}, s);
  }
  int64_t matrices = 1;
  for (size_t d = 0; d + 2 < in.q.ndim(); ++d) matrices *= in.q.shape(d);
  // a warp a query row, or a block (4 warps of 16 rows) 64 rows of one matrix
  const int64_t warps =
      kernel == HeadsKernel::kRows ? matrices * S : matrices * ((S + 63) / 64) * kWarpsPerBlock;
  const std::optional<int> threads = WholeBlocks(warps * kWarp, kWarp * kWarpsPerBlock);
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
  // Where there is no scale or no mask the softmax kernel's placeholder is its own input, the
  // scores: an input of this kernel, it would be evaluated (the product this kernel replaces, run
  // for nothing: the thirty-sixth session's H100 counted its Matmul). Q stands in, never read.
  if (in.terms.scale == ScoreTerms::Scale::kNone) in.factor = in.q;
  if (!in.terms.mask) in.mask = in.q;
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
  static const bool tensor_cores = TensorCoresWanted(s);
  if (tensor_cores)
    if (const std::optional<KernelLaunch> plan = PlanHeadsAttention(*in, HeadsKernel::kTensorCores, s))
      return LaunchKernel(HeadsMmaKernel(), *plan, s)[0];
  const std::optional<KernelLaunch> plan = PlanHeadsAttention(*in, HeadsKernel::kRows, s);
  if (!plan) return std::nullopt;
  return LaunchKernel(HeadsRowsKernel(), *plan, s)[0];
}

const char* HeadsAttentionSourceForTests(HeadsKernel kernel) {
  static const std::string rows = Header() + "\n// kernel body:\n" + kBody;
  static const std::string mma = HeadsMmaHeader() + "\n// kernel body:\n" + HeadsMmaBody();
  return kernel == HeadsKernel::kRows ? rows.c_str() : mma.c_str();
}

}  // namespace mlx_ep
