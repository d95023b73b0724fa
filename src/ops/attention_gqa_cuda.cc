// A GroupQueryAttention decode step as one MLX custom CUDA kernel
// (ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel; fused_gpu_internal.h, attention_contrib_gqa.cc).
//
// Why: MLX's host work per primitive is what a decode step's time is on the H200 (~5.5 µs of
// eval each, ~1,000 a TinyLlama step for ~0.5 ms of GPU work). One GroupQueryAttention layer was
// ~30 of them: the packed QKV's split (Reshape, Transpose, Slices), the rotation of Q and K (two
// fused kernels over Slice/ExpandDims views), Concatenates of the past buffer and the new K and
// V rows, the doubled query row and the mask cuDNN's masked attention needs (~54 µs of host time
// a call), the zeroing select and the output's transposes, and a copy of the strided V row for the
// in-place write. This kernel does all of it from the node's own inputs: the query (packed QKV or
// apart), the past buffers read where they are (stale rows never read), seqlens_k,
// total_sequence_length, the cos/sin caches (position_ids), and writes the output in its
// [B, 1, H * D] layout plus the rotated K row and the V row for the in-place update.
//
// Numerics as ORT's CPU kernel and the composed translation: the rotation in float32 rounded to T
// (ORT stores the rotated Q and K in T), float32 scores q.k * scale, a float32 softmax over the
// attended keys, P V in float32 with P unrounded (cuDNN rounds P to T), the output rounded once.
// The masks are attention_contrib_gqa.cc's for one query row: first prompt when
// total_sequence_length is 1, the new row at offset_b = seqlens_k[b] (0 on the first prompt),
// past rows j < offset_b, window [offset_b + 1 - window, ...), a row attending nothing is zero.
//
// Layout: one block of 128 threads per (batch entry, query head). The rotated query and key rows
// in shared memory; the scores of the P + 1 keys in shared memory (up to kMaxKeys), block
// reductions for the max and the sum; P V with each warp summing a quarter of the keys over all
// dimensions (lanes across dimensions: V rows read coalesced), the warps' sums added at the end.
// The first query head of each KV head writes that head's K and V rows.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mlx/fast.h"
#include "mlx/ops.h"
#include "ops/attention_gqa_step.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxKeys = 8192;  // 32 KiB of float scores in static shared memory
constexpr int kMaxHeadSize = 128;

constexpr const char* kHeader = R"(
namespace mlx_ep_gqa {

constexpr int kWarps = 4;  // the launch's 128 threads

// Nothing from the C library's headers, which NVRTC need not have (INFINITY, integer min/max):
// -inf as attention_vjp_cuda.cc's kernels, which ran on the H200, spell it.
__device__ __forceinline__ float negative_infinity() { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ int lesser(int a, int b) { return a < b ? a : b; }

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

// Value d of row x after the rotation by cos/sin row (c, s) of ROT / 2 values (ROT = 0: none):
// pairs (i, i + ROT / 2), or (2i, 2i + 1) when INTERLEAVED, in float32, rounded to T.
template <int ROT, bool INTERLEAVED, typename T>
__device__ __forceinline__ T rotated(const T* x, const T* c, const T* s, int d) {
  if (d >= ROT) return x[d];
  constexpr int HALF = ROT / 2;
  const bool second = INTERLEAVED ? (d & 1) != 0 : d >= HALF;
  const int i = INTERLEAVED ? d / 2 : (second ? d - HALF : d);
  const float x1 = static_cast<float>(INTERLEAVED ? x[2 * i] : x[i]);
  const float x2 = static_cast<float>(INTERLEAVED ? x[2 * i + 1] : x[i + HALF]);
  const float co = static_cast<float>(c[i]), si = static_cast<float>(s[i]);
  return static_cast<T>(second ? x1 * si + x2 * co : x1 * co - x2 * si);
}

// The step's shapes (compile-time constants at the call site): heads H and Hkv, past rows P, the
// caches' rows, the window (0: none), position_ids' row length (0: no position_ids), and where
// each batch entry's query, key and value rows start in their inputs (stride, offset: packed QKV
// is one input read three times).
struct StepShape {
  int heads, kv_heads, past, max_pos, window, pos_stride;
  int q_stride, q_off, k_stride, k_off, v_stride, v_off;
  float scale;
};

template <int D, int LCAP, int ROT, bool INTERLEAVED, typename T>
__device__ __forceinline__ void decode_step(const StepShape& sh, const T* q_in, const T* k_in, const T* v_in,
                                            const T* past_k, const T* past_v, const int* seqlens,
                                            const int* total_len, const T* cos_cache, const T* sin_cache,
                                            const int64_t* pos_ids, T* out, T* k_row, T* v_row) {
  __shared__ float scores[LCAP];
  __shared__ float qs[D];
  __shared__ float ks[D];
  __shared__ float red[32];
  __shared__ float partial[kWarps][D];
  const int H = sh.heads, Hkv = sh.kv_heads, P = sh.past, L = P + 1;
  const int bh = blockIdx.x, b = bh / H, h = bh % H, group = H / Hkv, kvh = h / group;
  const int tid = threadIdx.x, threads = blockDim.x;
  // The step's facts for entry b (attention_contrib_gqa.cc's StepOf and KeyMask, one query row).
  const int total = seqlens[b] + 1;
  const bool first = total_len[0] == 1;
  const int offset = first ? 0 : total - 1;
  const int end = lesser(offset + 1, total);
  const int start = sh.window > 0 ? offset + 1 - sh.window : 0;
  const bool new_row_inside = offset >= 0 && offset < P;
  auto attended = [&](int t) {  // t < P: past row t; t == P: the new row, at `offset`
    const int at = t < P ? t : offset;
    return (t < P ? t < offset : new_row_inside) && at < end && at >= start;
  };
  const T* q_row = q_in + static_cast<int64_t>(b) * sh.q_stride + sh.q_off + h * D;
  const T* k_new = k_in + static_cast<int64_t>(b) * sh.k_stride + sh.k_off + kvh * D;
  const T* v_new = v_in + static_cast<int64_t>(b) * sh.v_stride + sh.v_off + kvh * D;
  const T *c = cos_cache, *s = sin_cache;
  if (ROT > 0) {
    int pos = offset;
    if (sh.pos_stride > 0)  // ORT reads position_ids[0, 0] on the first prompt
      pos = static_cast<int>(first ? pos_ids[0] : pos_ids[static_cast<int64_t>(b) * sh.pos_stride]);
    pos = lesser(pos < 0 ? 0 : pos, sh.max_pos - 1);
    c += static_cast<int64_t>(pos) * (ROT / 2);
    s += static_cast<int64_t>(pos) * (ROT / 2);
  }
  const int64_t kv = static_cast<int64_t>(b) * Hkv + kvh;
  for (int d = tid; d < D; d += threads) {
    qs[d] = static_cast<float>(rotated<ROT, INTERLEAVED>(q_row, c, s, d));
    const T k = rotated<ROT, INTERLEAVED>(k_new, c, s, d);
    ks[d] = static_cast<float>(k);
    if (h % group == 0) {
      k_row[kv * D + d] = k;
      v_row[kv * D + d] = v_new[d];
    }
  }
  __syncthreads();
  float local_max = negative_infinity();
  for (int t = tid; t < L; t += threads) {
    float score = 0.f;
    if (attended(t)) {
      float dot = 0.f;
      if (t < P) {
        const T* key = past_k + (kv * P + t) * D;
        for (int d = 0; d < D; ++d) dot = fmaf(qs[d], static_cast<float>(key[d]), dot);
      } else {
        for (int d = 0; d < D; ++d) dot = fmaf(qs[d], ks[d], dot);
      }
      score = dot * sh.scale;
      local_max = fmaxf(local_max, score);
    }
    scores[t] = score;
  }
  const float top = block_reduce<true>(local_max, red);
  float local_sum = 0.f;
  for (int t = tid; t < L; t += threads) {
    const float p = attended(t) ? expf(scores[t] - top) : 0.f;
    scores[t] = p;
    local_sum += p;
  }
  const float sum = block_reduce<false>(local_sum, red);  // its barriers publish `scores` too
  constexpr int PER_LANE = (D + 31) / 32;
  const int warp = tid / 32, lane = tid & 31;
  float acc[PER_LANE];
  for (int i = 0; i < PER_LANE; ++i) acc[i] = 0.f;
  for (int t = warp; t < L; t += kWarps) {
    if (!attended(t)) continue;  // a stale row of the buffer is never read
    const T* value = t < P ? past_v + (kv * P + t) * D : v_new;
    const float p = scores[t];
    for (int i = 0; i < PER_LANE; ++i) {
      const int d = lane + 32 * i;
      if (d < D) acc[i] = fmaf(p, static_cast<float>(value[d]), acc[i]);
    }
  }
  for (int i = 0; i < PER_LANE; ++i) {
    const int d = lane + 32 * i;
    if (d < D) partial[warp][d] = acc[i];
  }
  __syncthreads();
  const bool any = start < end;  // a row attending no key is zero, as in ORT
  for (int d = tid; d < D; d += threads) {
    float y = 0.f;
    for (int w = 0; w < kWarps; ++w) y += partial[w][d];
    out[static_cast<int64_t>(bh) * D + d] = any ? static_cast<T>(y / sum) : static_cast<T>(0.f);
  }
}

}  // namespace mlx_ep_gqa
)";

// The body MLX's cuda_kernel wraps: its inputs, outputs and template constants by name. Absent
// caches and position_ids are other inputs passed in their place (never read).
constexpr const char* kSource = R"(
  const mlx_ep_gqa::StepShape shape{H, HKV, P, MAXPOS, WINDOW, POS_STRIDE, QS, QO, KS, KO, VS, VO,
                                    __int_as_float(SCALE_BITS)};
  mlx_ep_gqa::decode_step<D, LCAP, ROT, INTERLEAVED>(shape, q_in, k_in, v_in, past_k, past_v, seqlens,
      total_len, reinterpret_cast<const T*>(cos_cache), reinterpret_cast<const T*>(sin_cache),
      reinterpret_cast<const int64_t*>(pos_ids), out, k_row, v_row);
)";

const mx::fast::CustomKernelFunction& StepKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_gqa_decode_step",
                            {"q_in", "k_in", "v_in", "past_k", "past_v", "seqlens", "total_len", "cos_cache",
                             "sin_cache", "pos_ids"},
                            {"out", "k_row", "v_row"}, kSource, kHeader, /*ensure_row_contiguous=*/true);
  return kernel;
}

bool IsFloat(mx::Dtype t) { return t == mx::float16 || t == mx::bfloat16 || t == mx::float32; }

/** Where each batch entry's query, key and value rows start (stride, offset), in elements; empty
 *  when the inputs' shapes are not [B, 1, ...] with the heads' widths. */
std::optional<std::array<int, 6>> RowStarts(const GqaDecodeStepInputs& in) {
  const int batch = in.query.shape(0), D = in.head_size;
  const int q_width = in.heads * D, kv_width = in.kv_heads * D;
  auto is_rows = [&](const mx::array& a, int width) {
    return a.ndim() == 3 && a.shape(0) == batch && a.shape(1) == 1 && a.shape(2) == width;
  };
  if (!in.key) {
    const int all = q_width + 2 * kv_width;
    if (!is_rows(in.query, all)) return std::nullopt;
    return std::array<int, 6>{all, 0, all, q_width, all, q_width + kv_width};
  }
  if (!is_rows(in.query, q_width) || !is_rows(*in.key, kv_width) || !is_rows(*in.value, kv_width))
    return std::nullopt;
  return std::array<int, 6>{q_width, 0, kv_width, 0, kv_width, 0};
}

/** The rotation's constants (ROT, MAXPOS, POS_STRIDE), or nullopt for caches or position_ids
 *  of other shapes than the kernel reads. */
std::optional<std::array<int, 3>> RotationConstants(const GqaDecodeStepInputs& in) {
  if (!in.cos_cache) return in.position_ids ? std::nullopt : std::optional(std::array<int, 3>{0, 1, 0});
  const mx::array &c = *in.cos_cache, &s = *in.sin_cache;
  if (c.ndim() != 2 || s.shape() != c.shape() || c.shape(0) == 0 || 2 * c.shape(1) > in.head_size)
    return std::nullopt;
  int pos_stride = 0;
  if (const std::optional<mx::array>& ids = in.position_ids) {
    if (ids->ndim() != 2 || ids->shape(0) != in.query.shape(0) || ids->shape(1) < 1 ||
        ids->dtype() != mx::int64)
      return std::nullopt;
    pos_stride = ids->shape(1);
  }
  return std::array<int, 3>{2 * c.shape(1), c.shape(0), pos_stride};
}

}  // namespace

const char* GqaDecodeKernelSourceForTests() {
  static const std::string text = std::string(kHeader) + "\n// kernel body:\n" + kSource;
  return text.c_str();
}

std::optional<DecodeStepLaunch> PlanDecodeStep(const GqaDecodeStepInputs& in) {
  const mx::array &q = in.query, &past_k = in.past_key, &past_v = in.past_value;
  const int D = in.head_size, batch = q.ndim() == 3 ? q.shape(0) : 0;
  if (batch == 0 || D < 1 || D > kMaxHeadSize || in.kv_heads < 1 || in.heads % in.kv_heads != 0)
    return std::nullopt;
  const mx::Dtype t = q.dtype();
  if (!IsFloat(t) || past_k.dtype() != t || past_v.dtype() != t) return std::nullopt;
  const mx::Shape past_shape = {batch, in.kv_heads, past_k.ndim() == 4 ? past_k.shape(2) : 0, D};
  if (past_k.shape() != past_shape || past_v.shape() != past_shape) return std::nullopt;
  const int past = past_shape[2], keys = past + 1;
  if (past == 0 || keys > kMaxKeys) return std::nullopt;
  const std::optional<std::array<int, 6>> starts = RowStarts(in);
  const std::optional<std::array<int, 3>> rotation = RotationConstants(in);
  if (!starts || !rotation || in.seqlens_k.size() != static_cast<size_t>(batch) ||
      in.total_length.size() != 1)
    return std::nullopt;
  // Template constants become part of the kernel's name: no minus sign (a negative scale's bits).
  int32_t scale_bits;
  std::memcpy(&scale_bits, &in.scale, sizeof scale_bits);
  if (!(in.scale > 0.f) || !std::isfinite(in.scale) || in.window < 0) return std::nullopt;
  const int cap = std::max(256, static_cast<int>(std::bit_ceil(static_cast<unsigned>(keys))));
  const mx::array& placeholder = in.seqlens_k;  // for absent inputs: never read
  const auto& [qs, qo, ks, ko, vs, vo] = *starts;
  const auto& [rot, max_pos, pos_stride] = *rotation;
  return DecodeStepLaunch{
      {q, in.key ? *in.key : q, in.value ? *in.value : q, past_k, past_v, in.seqlens_k, in.total_length,
       in.cos_cache ? *in.cos_cache : placeholder, in.sin_cache ? *in.sin_cache : placeholder,
       in.position_ids ? *in.position_ids : placeholder},
      {{batch, 1, in.heads * D}, {batch, in.kv_heads, 1, D}, {batch, in.kv_heads, 1, D}},
      t,
      batch * in.heads * kThreads,
      {{"D", D},
       {"LCAP", cap},
       {"ROT", rot},
       {"INTERLEAVED", in.interleaved},
       {"H", in.heads},
       {"HKV", in.kv_heads},
       {"P", past},
       {"MAXPOS", max_pos},
       {"WINDOW", in.window},
       {"POS_STRIDE", pos_stride},
       {"QS", qs},
       {"QO", qo},
       {"KS", ks},
       {"KO", ko},
       {"VS", vs},
       {"VO", vo},
       {"SCALE_BITS", scale_bits},
       {"T", t}}};
}

std::optional<GqaDecodeStep> DecodeStepByKernel(const GqaDecodeStepInputs& in, mx::Stream s) {
  if (!CudaKernelsAvailable(s)) return std::nullopt;
  std::optional<DecodeStepLaunch> plan = PlanDecodeStep(in);
  if (!plan) return std::nullopt;
  const std::vector<mx::array> outs =
      StepKernel()(plan->inputs, plan->output_shapes, {plan->dtype, plan->dtype, plan->dtype},
                   {plan->threads, 1, 1}, {kThreads, 1, 1}, plan->constants, std::nullopt, false, s);
  return GqaDecodeStep{outs[0], outs[1], outs[2]};
}

}  // namespace mlx_ep
