// The GroupQueryAttention decode step's grouped kernel (ONNXRUNTIME_EP_MLX_DECODE_GROUPED=1,
// opt-in: slower where measured): one block per (batch entry, KV head, split of the past
// rows) computes the group's H / Hkv query heads together, so each past K and V row is read once
// (attention_gqa_cuda.cc's block per query head reads a KV head's rows once per query head).
//
// Why: on the thirty-first session's H100 a fp16 TinyLlama decode step's host, done encoding,
// waited 1.0 ms for the GPU (tools/gpu/step_phases.py), and the per-head kernel took 22 x 21.4 us
// of its 1.7 ms of kernel time for ~1 MB of K and V a layer: each of its 32 blocks walked the
// buffer's 2,048 rows in passes (the attended 1,024 since this session), a chain of dependent
// loads and block reductions. Here a block's rows (at most ROWS: 64 of a 64-wide head) are
// loaded in one round of 16-byte loads, K and V together, into shared memory; the scores of
// the group's heads, each head's softmax over the split's rows and the P V sums follow from shared
// memory; the last block of a (batch entry, KV head) to finish merges the splits' parts with the
// new row (a count per KV head, as the per-head kernel's splits). The rows are the ones a key mask
// admits, [start, offset), shared evenly among the splits at run time: at 1,024 of 2,048 rows,
// 32 splits of 32 rows, 128 blocks at batch 1.
//
// Measured (thirty-second session, an H100, CUPTI timeline): 22 x 34 us a fp16 step (25 us int4),
// against the per-head kernel's 22 x 21.4 us on the thirty-first session's H100; the decode A/B
// (step_phases, two rounds) no faster. Its GPU test passed; it stays opt-in.
//
// Numerics as the per-head kernel's (attention_gqa_cuda.cc): the rotation in float32 rounded to T,
// float32 scores, softmax and P V with P unrounded, the output rounded once; the sums in another
// order.
#include <algorithm>
#include <string>
#include <vector>

#include "common/env.h"
#include "ops/attention_gqa_cuda_internal.h"

namespace mlx_ep {
namespace {

constexpr int kGroupedThreads = 256;
constexpr int kMaxSharedBytes = 48 * 1024;  // static shared memory a block may declare

constexpr const char* kGroupedHeader = R"(
namespace mlx_ep_gqa {

// A block's shared memory, in floats: the group's rotated query rows and the new key row; the
// split's K rows (D + 1 floats a row, so that the lanes reading one column of consecutive rows hit
// distinct banks) and V rows; the heads' scores, then weights, of those rows; a head's max and sum
// and the new row's weight. The merge keeps the splits' weights where the K rows were.
template <int D, int G, int ROWS>
struct GroupedShared {
  float q[G * D];
  float k_new[D];
  float k[ROWS * (D + 1)];
  float v[ROWS * D];
  float p[G * ROWS];
  float head[2 * G];
  float w_new[G];
};

template <typename T, int CH>
__device__ __forceinline__ void store_floats(float* to, const Chunk<T, CH>& c) {
#pragma unroll
  for (int e = 0; e < CH; ++e) to[e] = static_cast<float>(c.v[e]);
}

// The split's rows (`rows` of them from `keys` and `values`) into shared memory as floats, CH
// values a load, every load of a thread issued before the first store; `between` runs in between
// (the query's rotation, whose loads overlap these).
template <int D, int CH, int ROWS, int NT, typename T, typename F>
__device__ __forceinline__ void load_rows(const T* keys, const T* values, int rows, float* k, float* v,
                                          F between) {
  constexpr int CHUNKS = D / CH, PER = (ROWS * CHUNKS + NT - 1) / NT;
  Chunk<T, CH> kc[PER], vc[PER];
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const int i = threadIdx.x + u * NT;
    const bool use = i < rows * CHUNKS;
    kc[u] = load_chunk<D, CH>(keys, i / CHUNKS, use, i % CHUNKS);
    vc[u] = load_chunk<D, CH>(values, i / CHUNKS, use, i % CHUNKS);
  }
  between();
#pragma unroll
  for (int u = 0; u < PER; ++u) {
    const int i = threadIdx.x + u * NT;
    if (i < rows * CHUNKS) {
      const int r = i / CHUNKS, d = (i % CHUNKS) * CH;
      store_floats(k + r * (D + 1) + d, kc[u]);
      store_floats(v + r * D + d, vc[u]);
    }
  }
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Each head's softmax over the split's rows (scores in p[g * ROWS + r], replaced by their
// exponentials): head[2g] its max, head[2g + 1] its sum (-inf and 0 without rows).
template <int G, int ROWS, int NT>
__device__ __forceinline__ void heads_softmax(int rows, float* p, float* head) {
  const int lane = threadIdx.x % 32;
  for (int g = threadIdx.x / 32; g < G; g += NT / 32) {
    float m = mlx_ep_cuda::negative_infinity();
    for (int r = lane; r < rows; r += 32) m = fmaxf(m, p[g * ROWS + r]);
    m = warp_max(m);
    float l = 0.f;
    for (int r = lane; r < rows; r += 32) {
      const float e = expf(p[g * ROWS + r] - m);
      p[g * ROWS + r] = e;
      l += e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      head[2 * g] = m;
      head[2 * g + 1] = l;
    }
  }
}

// The last block of a (batch entry, KV head) merges the SPLITS parts (max m_i, sum l_i, the P V
// sums) and the new row (score s, weight exp(s - M), value row v_new) of each head:
//   out = (sum_i acc_i exp(m_i - M) + [used] exp(s - M) v_new)
//         / (sum_i l_i exp(m_i - M) + [used] exp(s - M)),
// M the largest of the m_i of splits that attended a row and s.
template <int D, int G, int ROWS, int NT, int SPLITS, typename T>
__device__ __forceinline__ void merge_group(GroupedShared<D, G, ROWS>& sm, const float* all, float scale,
                                            bool new_used, bool any, const T* v_new, T* out) {
  constexpr int STRIDE = D + 2;
  const int lane = threadIdx.x % 32;
  float* weights = sm.k;  // G * SPLITS floats (PlanGroupedDecodeStep keeps them within the K rows)
  for (int g = threadIdx.x / 32; g < G; g += NT / 32) {
    float dot = 0.f;
    for (int d = lane; d < D; d += 32) dot = fmaf(sm.q[g * D + d], sm.k_new[d], dot);
    const float s = warp_sum(dot) * scale;
    float top = new_used ? s : mlx_ep_cuda::negative_infinity();
    for (int i = lane; i < SPLITS; i += 32)
      if (__ldcg(all + (i * G + g) * STRIDE + 1) > 0.f)  // a split that attended a row
        top = fmaxf(top, __ldcg(all + (i * G + g) * STRIDE));
    top = warp_max(top);
    float sum = 0.f;
    for (int i = lane; i < SPLITS; i += 32) {
      const float l = __ldcg(all + (i * G + g) * STRIDE + 1);
      const float w = l > 0.f ? expf(__ldcg(all + (i * G + g) * STRIDE) - top) : 0.f;
      weights[g * SPLITS + i] = w;
      sum += w * l;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      sm.w_new[g] = new_used ? expf(s - top) : 0.f;
      sm.head[2 * g + 1] = sum + sm.w_new[g];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += NT) {
    const int g = i / D, d = i % D;
    float y = sm.w_new[g] * static_cast<float>(v_new[d]);
    // 16 splits' loads in flight before their sums: the merge is the step's last chain of L2
    // round trips (a thread's SPLITS loads for each of its outputs).
#pragma unroll 16
    for (int j = 0; j < SPLITS; ++j)
      y = fmaf(weights[g * SPLITS + j], __ldcg(all + (j * G + g) * STRIDE + 2 + d), y);
    out[i] = any ? static_cast<T>(y / sm.head[2 * g + 1]) : static_cast<T>(0.f);
  }
}

// One query row's attention for the G = H / Hkv query heads of KV head kvh of entry b, over
// split `split` of the past rows the masks admit; the last of the SPLITS blocks merges.
template <int D, int G, int ROWS, int ROT, bool INTERLEAVED, int NT, int SPLITS, typename T>
__device__ __forceinline__ void decode_grouped(const StepShape& sh, const T* q_in, const T* k_in, const T* v_in,
                                               const T* past_k, const T* past_v, const int* seqlens,
                                               const int* total_len, const T* cos_cache, const T* sin_cache,
                                               const int64_t* pos_ids, T* out, T* k_row, T* v_row,
                                               int* counters, float* parts) {
  constexpr int STRIDE = D + 2;
  constexpr int WIDE = D % (16 / sizeof(T)) == 0 ? 16 / sizeof(T) : 1;
  __shared__ GroupedShared<D, G, ROWS> sm;
  __shared__ int last;
  const int Hkv = sh.kv_heads, P = sh.past, tid = threadIdx.x;
  const int split = blockIdx.x % SPLITS, bk = blockIdx.x / SPLITS, b = bk / Hkv, kvh = bk % Hkv;
  const StepFacts facts = step_facts(sh, seqlens, total_len, b);
  const int offset = facts.offset, end = facts.end, start = facts.start;
  const bool new_used = offset >= 0 && offset < P && offset < end && offset >= start;
  const T *c = cos_cache, *s = sin_cache;
  rotation_rows<ROT>(sh, facts, pos_ids, b, c, s);
  // The admitted past rows [row_lo, row_hi), an even share each split (at most ROWS: SPLITS *
  // ROWS >= P).
  const int row_lo = lesser(start > 0 ? start : 0, P);
  const int row_bound = lesser(P, lesser(offset, end));
  const int row_hi = row_bound > row_lo ? row_bound : row_lo;
  const int share = (row_hi - row_lo + SPLITS - 1) / SPLITS;
  const int lo = lesser(row_lo + split * share, row_hi), rows = lesser(lo + share, row_hi) - lo;
  const int64_t kv = static_cast<int64_t>(b) * Hkv + kvh;
  const T* keys = past_k + (kv * P + lo) * D;
  const T* values = past_v + (kv * P + lo) * D;
  const T* k_new = k_in + static_cast<int64_t>(b) * sh.k_stride + sh.k_off + kvh * D;
  const T* v_new = v_in + static_cast<int64_t>(b) * sh.v_stride + sh.v_off + kvh * D;
  auto rotate = [&] {  // the group's query rows and the new key row (the first split writes K and V's)
    for (int i = tid; i < G * D; i += NT) {
      const int d = i % D, h = kvh * G + i / D;
      const T* q_row = q_in + static_cast<int64_t>(b) * sh.q_stride + sh.q_off + h * D;
      sm.q[i] = static_cast<float>(mlx_ep_cuda::rotated<ROT, INTERLEAVED>(q_row, c, s, d));
    }
    for (int d = tid; d < D; d += NT) {
      const T k = mlx_ep_cuda::rotated<ROT, INTERLEAVED>(k_new, c, s, d);
      sm.k_new[d] = static_cast<float>(k);
      if (split == 0) {
        k_row[kv * D + d] = k;
        v_row[kv * D + d] = v_new[d];
      }
    }
  };
  // 16-byte loads where D allows them and the buffers are 16-byte aligned (a view into a larger
  // allocation need not be), else one value at a time.
  const unsigned long long bases =
      reinterpret_cast<unsigned long long>(past_k) | reinterpret_cast<unsigned long long>(past_v);
  if (WIDE > 1 && (bases & 15) == 0)
    load_rows<D, WIDE, ROWS, NT>(keys, values, rows, sm.k, sm.v, rotate);
  else
    load_rows<D, 1, ROWS, NT>(keys, values, rows, sm.k, sm.v, rotate);
  __syncthreads();
  for (int i = tid; i < G * rows; i += NT) {  // the scores: lanes on consecutive rows of one head
    const int g = i / rows, r = i % rows;
    float dot = 0.f;
#pragma unroll 8
    for (int d = 0; d < D; ++d) dot = fmaf(sm.q[g * D + d], sm.k[r * (D + 1) + d], dot);
    sm.p[g * ROWS + r] = dot * sh.scale;
  }
  __syncthreads();
  heads_softmax<G, ROWS, NT>(rows, sm.p, sm.head);
  __syncthreads();
  float* part = parts + (kv * SPLITS + split) * G * STRIDE;
  for (int i = tid; i < G * D; i += NT) {  // each head's P V sums over the split's rows
    const int g = i / D, d = i % D;
    float acc = 0.f;
    for (int r = 0; r < rows; ++r) acc = fmaf(sm.p[g * ROWS + r], sm.v[r * D + d], acc);
    part[g * STRIDE + 2 + d] = acc;
  }
  for (int g = tid; g < G; g += NT) {
    part[g * STRIDE] = sm.head[2 * g];
    part[g * STRIDE + 1] = sm.head[2 * g + 1];
  }
  __threadfence();  // this block's parts, before its count
  __syncthreads();
  if (tid == 0) last = atomicAdd(counters + bk, 1) == SPLITS - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' parts, after their counts
  merge_group<D, G, ROWS, NT, SPLITS>(sm, parts + kv * SPLITS * G * STRIDE, sh.scale, new_used, start < end,
                                      v_new, out + (static_cast<int64_t>(b) * sh.heads + kvh * G) * D);
  if (tid == 0) counters[bk] = 0;
}

}  // namespace mlx_ep_gqa
)";

constexpr const char* kGroupedBody = R"(
  const mlx_ep_gqa::StepShape shape{H, HKV, P, MAXPOS, WINDOW, POS_STRIDE, QS, QO, KS, KO, VS, VO,
                                    __int_as_float(SCALE_BITS)};
  mlx_ep_gqa::decode_grouped<D, H / HKV, ROWS, ROT, INTERLEAVED, NT, SPLITS>(shape, q_in, k_in, v_in, past_k,
      past_v, seqlens, total_len, reinterpret_cast<const T*>(cos_cache), reinterpret_cast<const T*>(sin_cache),
      reinterpret_cast<const int64_t*>(pos_ids), out, k_row, v_row, const_cast<int*>(counters), parts);
)";

const std::string& GroupedHeader() {
  static const std::string text = GqaDecodeHeader() + kGroupedHeader;
  return text;
}

/** GroupedShared's bytes. */
int GroupedSharedBytes(int D, int G, int rows) {
  return 4 * (G * D + D + rows * (D + 1) + rows * D + G * rows + 3 * G) + 4;
}

}  // namespace

bool DecodeGroupedEnabled() {
  static const bool on = EnvFlag(env::kDecodeGrouped);
  return on;
}

std::string GqaGroupedKernelSourceForTests() {
  return GroupedHeader() + "\n// kernel body:\n" + kGroupedBody;
}

std::optional<KernelLaunch> PlanGroupedDecodeStep(KernelLaunch launch, int batch, int heads, int kv_heads,
                                                  int D, int past) {
  const int G = heads / kv_heads;
  // Rows a block: 4,096 values of K (64 rows of a 64-wide head), fewer where the shared memory
  // would not fit.
  int rows = std::max(8, std::min(64, 4096 / D));
  while (rows > 8 && GroupedSharedBytes(D, G, rows) > kMaxSharedBytes) rows /= 2;
  const int splits = (past + rows - 1) / rows;
  // The merge keeps the splits' weights where the K rows were.
  if (GroupedSharedBytes(D, G, rows) > kMaxSharedBytes || G * splits > rows * (D + 1)) return std::nullopt;
  const int blocks = batch * kv_heads;
  launch.inputs.push_back(mx::array(std::vector<int32_t>(blocks, 0).data(), {blocks}, mx::int32));
  launch.output_shapes.push_back({blocks * splits * G * (D + 2)});
  launch.output_dtypes.push_back(mx::float32);
  launch.threads = blocks * splits * kGroupedThreads;
  launch.per_block = kGroupedThreads;
  launch.constants.push_back({"ROWS", rows});
  launch.constants.push_back({"SPLITS", splits});
  launch.constants.push_back({"NT", kGroupedThreads});
  return launch;
}

const mx::fast::CustomKernelFunction& GroupedStepKernel() {
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "mlx_ep_gqa_decode_grouped",
      {"q_in", "k_in", "v_in", "past_k", "past_v", "seqlens", "total_len", "cos_cache", "sin_cache",
       "pos_ids", "counters"},
      {"out", "k_row", "v_row", "parts"}, kGroupedBody, GroupedHeader(), /*ensure_row_contiguous=*/true);
  return kernel;
}

}  // namespace mlx_ep
