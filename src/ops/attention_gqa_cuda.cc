// A GroupQueryAttention decode step's core as one MLX custom CUDA kernel
// (ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel; fused_gpu_internal.h, attention_gqa_fused.cc).
//
// Why: on the H200 cuDNN's masked attention costs ~54 µs of MLX host time a call (a TinyLlama
// decode step: 22 calls, ~1.2 ms) and feeding it takes a Concatenate of the past buffer and the
// new row for K and for V, the doubled query row and its mask (~5 more primitives a layer); a
// custom kernel costs ~4 µs (bench/mlx_primitive_cost.py). This one reads the past buffer and the
// new row where they are (no Concatenate) and the step's key mask (shared by the layers).
// Numerics as ORT's and the composed core's: float32 scores q.k * scale, a float32 softmax over
// the allowed keys (masked keys are skipped, never read), P V accumulated in float32 with P
// unrounded (cuDNN rounds P to the input type). Returns float32 [B, H, 1, D].
//
// Layout: one block of 128 threads per (batch entry, query head); the scores of the P + 1 keys
// in shared memory (up to kMaxKeys), block reductions for the max and the sum, then one thread
// per output dimension sums over the keys (reading V rows coalesced across the dimensions).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "mlx/fast.h"
#include "mlx/ops.h"
#include "ops/fused_gpu_internal.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxKeys = 8192;  // 32 KiB of float scores in static shared memory

constexpr const char* kHeader = R"(
namespace mlx_ep_gqa {

// A block-wide max (MAX) or sum of every thread's value; every thread gets it. `red` holds one
// value per warp; blockDim.x is a multiple of 32.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, other) : v + other;
  }
  __syncthreads();  // a previous reduction's readers are done with `red`
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) r = MAX ? fmaxf(r, red[w]) : r + red[w];
  return r;
}

// q [B, H, 1, D]; past_k/past_v [B, Hkv, P, D]; k_new/v_new [B, Hkv, 1, D]; allowed [B, L]
// (L = P + 1: the past rows, then the new one); out [B, H, 1, D] float32.
template <int D, int LCAP, typename T>
__device__ __forceinline__ void decode_core(const T* q, const T* past_k, const T* past_v, const T* k_new,
                                            const T* v_new, const bool* allowed, float* out, int H,
                                            int Hkv, int P, float scale) {
  __shared__ float scores[LCAP];
  __shared__ float qs[D];
  __shared__ float red[32];
  const int bh = blockIdx.x, b = bh / H, h = bh % H, kvh = h / (H / Hkv);
  const int L = P + 1, tid = threadIdx.x, threads = blockDim.x;
  const int64_t kv = static_cast<int64_t>(b) * Hkv + kvh;
  const bool* mask = allowed + static_cast<int64_t>(b) * L;
  for (int d = tid; d < D; d += threads) qs[d] = static_cast<float>(q[static_cast<int64_t>(bh) * D + d]);
  __syncthreads();
  float local_max = -INFINITY;
  for (int t = tid; t < L; t += threads) {
    float score = 0.f;
    if (mask[t]) {
      const T* key = t < P ? past_k + (kv * P + t) * D : k_new + kv * D;
      float dot = 0.f;
      for (int d = 0; d < D; ++d) dot = fmaf(qs[d], static_cast<float>(key[d]), dot);
      score = dot * scale;
      local_max = fmaxf(local_max, score);
    }
    scores[t] = score;
  }
  const float top = block_reduce<true>(local_max, red);
  float local_sum = 0.f;
  for (int t = tid; t < L; t += threads) {
    const float p = mask[t] ? expf(scores[t] - top) : 0.f;
    scores[t] = p;
    local_sum += p;
  }
  const float sum = block_reduce<false>(local_sum, red);  // its barriers publish `scores` too
  for (int d = tid; d < D; d += threads) {
    float acc = 0.f;
    for (int t = 0; t < L; ++t) {
      if (!mask[t]) continue;  // a stale row of the buffer is never read
      const T* value = t < P ? past_v + (kv * P + t) * D : v_new + kv * D;
      acc = fmaf(scores[t], static_cast<float>(value[d]), acc);
    }
    out[static_cast<int64_t>(bh) * D + d] = acc / sum;  // no allowed key: the caller zeroes the row
  }
}

}  // namespace mlx_ep_gqa
)";

constexpr const char* kSource = R"(
  mlx_ep_gqa::decode_core<D, LCAP>(q, past_k, past_v, k_new, v_new, allowed, out, q_shape[1],
                                   past_k_shape[1], past_k_shape[2], __int_as_float(SCALE_BITS));
)";

const mx::fast::CustomKernelFunction& DecodeKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_gqa_decode", {"q", "past_k", "past_v", "k_new", "v_new", "allowed"}, {"out"}, kSource, kHeader,
      /*ensure_row_contiguous=*/true);
  return kernel;
}

}  // namespace

const char* GqaDecodeKernelSourceForTests() {
  static const std::string text = std::string(kHeader) + "\n// kernel body:\n" + kSource;
  return text.c_str();
}

std::optional<mx::array> DecodeCoreByKernel(const mx::array& q, const mx::array& past_k,
                                            const mx::array& past_v, const mx::array& k, const mx::array& v,
                                            const mx::array& allowed, float scale, mx::Stream s) {
  const int batch = q.shape(0), heads = q.shape(1), dim = q.shape(3), past = past_k.shape(2);
  const int keys = past + 1;
  if (!CudaKernelsAvailable(s) || q.shape(2) != 1 || keys > kMaxKeys || heads % past_k.shape(1) != 0)
    return std::nullopt;
  if (dim != 64 && dim != 80 && dim != 96 && dim != 128) return std::nullopt;  // one kernel per D
  const int cap = std::max(256, static_cast<int>(std::bit_ceil(static_cast<unsigned>(keys))));
  int32_t scale_bits;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  const mx::array mask = mx::reshape(allowed, {batch, keys}, s);
  return DecodeKernel()({q, past_k, past_v, k, v, mask}, {{batch, heads, 1, dim}}, {mx::float32},
                        {batch * heads * kThreads, 1, 1}, {kThreads, 1, 1},
                        {{"D", dim}, {"LCAP", cap}, {"SCALE_BITS", scale_bits}, {"T", q.dtype()}},
                        std::nullopt, false, s)[0];
}

}  // namespace mlx_ep
