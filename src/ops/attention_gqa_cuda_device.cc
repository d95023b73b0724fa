// The GroupQueryAttention decode step's device code (attention_gqa_cuda.cc plans and launches
// it; attention_gqa_grouped_cuda.cc extends it): the step's facts, the rotation's rows, the
// 16-byte chunks of the past rows, the passes over them, the splits' merge and decode_step, as
// NVRTC compiles them through MLX's cuda_kernel. The host's planning (SharedBytes, KeysPerPass)
// mirrors the layout written here.
#include <string>

#include "ops/attention_gqa_cuda_internal.h"
#include "ops/cuda_block_reduce.h"
#include "ops/cuda_rotary.h"

namespace mlx_ep {
namespace {

constexpr const char* kHeader = R"(
namespace mlx_ep_gqa {


// Nothing from the C library's headers, which NVRTC need not have (integer min/max; -inf is
// mlx_ep_cuda::negative_infinity, cuda_block_reduce.h).
__device__ __forceinline__ int lesser(int a, int b) { return a < b ? a : b; }

// The step's shapes (compile-time constants at the call site): heads H and Hkv, past rows P, the
// caches' rows, the window (0: none), position_ids' row length (0: no position_ids), and where
// each batch entry's query, key and value rows start in their inputs (stride, offset: packed QKV
// is one input read three times).
struct StepShape {
  int heads, kv_heads, past, max_pos, window, pos_stride;
  int q_stride, q_off, k_stride, k_off, v_stride, v_off;
  float scale;
};

// The step's facts for entry b (attention_contrib_gqa.cc's StepOf and KeyMask, one query row):
// the new row's offset, the attended rows' end and start (the window), and whether this is a first
// prompt (total_sequence_length 1).
struct StepFacts {
  int offset, end, start;
  bool first;
};

__device__ __forceinline__ StepFacts step_facts(const StepShape& sh, const int* seqlens, const int* total_len,
                                                int b) {
  StepFacts f;
  const int total = seqlens[b] + 1;
  f.first = total_len[0] == 1;
  f.offset = f.first ? 0 : total - 1;
  f.end = lesser(f.offset + 1, total);
  f.start = sh.window > 0 ? f.offset + 1 - sh.window : 0;
  return f;
}

// Entry b's rows of the cos/sin caches: at position_ids (ORT reads position_ids[0, 0] on the first
// prompt) or the new row's offset, clipped to the caches.
template <int ROT, typename T>
__device__ __forceinline__ void rotation_rows(const StepShape& sh, const StepFacts& f, const int64_t* pos_ids,
                                              int b, const T*& c, const T*& s) {
  if (ROT == 0) return;
  int pos = f.offset;
  if (sh.pos_stride > 0)
    pos = static_cast<int>(f.first ? pos_ids[0] : pos_ids[static_cast<int64_t>(b) * sh.pos_stride]);
  pos = lesser(pos < 0 ? 0 : pos, sh.max_pos - 1);
  c += static_cast<int64_t>(pos) * (ROT / 2);
  s += static_cast<int64_t>(pos) * (ROT / 2);
}

// How the block's NT threads share a past buffer's rows, CH values of a row at a time (16-byte
// loads where CH * sizeof(T) is 16): SUB lanes a row (the row's CHUNKS chunks, PER each), KEYS
// rows a pass of the block, U passes' loads issued before their arithmetic (the rows are
// independent: U * KEYS rows in flight, where one thread walking its keys waited on each load).
template <int D, int CH, int NT>
struct Lanes {
  static constexpr int CHUNKS = D / CH;
  static constexpr int SUB = CHUNKS > 16 ? 32 : CHUNKS > 8 ? 16 : CHUNKS > 4 ? 8 : CHUNKS > 2 ? 4 : CHUNKS;
  static constexpr int PER = (CHUNKS + SUB - 1) / SUB;
  static constexpr int KEYS = NT / SUB;
  static constexpr int U = 8;
};

template <typename T, int CH>
struct alignas(CH * sizeof(T)) Chunk {
  T v[CH];
};

// Chunk i of this lane (lane j of its row's SUB) of row t, or zeros for a row not attended (a stale
// row of the buffer is never read) or a chunk past the row.
template <int D, int CH, typename T>
__device__ __forceinline__ Chunk<T, CH> load_chunk(const T* rows, int t, bool use, int chunk) {
  Chunk<T, CH> c;
  if (use && chunk < D / CH) {
    c = *reinterpret_cast<const Chunk<T, CH>*>(rows + static_cast<int64_t>(t) * D + chunk * CH);
  } else {
#pragma unroll
    for (int e = 0; e < CH; ++e) c.v[e] = static_cast<T>(0.f);
  }
  return c;
}

// One pass's loads: row base + u * KEYS + group for each u, this lane's chunks of it, and whether
// the row is attended (use[u]; its chunks are zeros when not).
template <int D, int CH, int NT, typename T, typename F>
__device__ __forceinline__ void load_pass(const T* rows, int base, int hi, F attended,
                                          Chunk<T, CH> (&c)[Lanes<D, CH, NT>::U][Lanes<D, CH, NT>::PER],
                                          bool (&use)[Lanes<D, CH, NT>::U]) {
  using L = Lanes<D, CH, NT>;
  const int group = threadIdx.x / L::SUB, j = threadIdx.x % L::SUB;
#pragma unroll
  for (int u = 0; u < L::U; ++u) {
    const int t = base + u * L::KEYS + group;
    use[u] = t < hi && attended(t);
#pragma unroll
    for (int i = 0; i < L::PER; ++i) c[u][i] = load_chunk<D, CH>(rows, t, use[u], j + i * L::SUB);
  }
}

// scores[t - lo] = q . key_t * scale for the past rows lo <= t < hi that are attended (0 for the
// others); returns this thread's largest score (-inf if none).
template <int D, int CH, int NT, typename T, typename F>
__device__ __forceinline__ float past_scores(const float* qs, const T* keys, int lo, int hi, float scale,
                                             F attended, float* scores) {
  using L = Lanes<D, CH, NT>;
  const int group = threadIdx.x / L::SUB, j = threadIdx.x % L::SUB;
  float local_max = mlx_ep_cuda::negative_infinity();
  for (int base = lo; base < hi; base += L::U * L::KEYS) {
    Chunk<T, CH> c[L::U][L::PER];
    bool use[L::U];
    load_pass<D, CH, NT>(keys, base, hi, attended, c, use);
#pragma unroll
    for (int u = 0; u < L::U; ++u) {
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < L::PER; ++i) {
        const int chunk = j + i * L::SUB;
        if (chunk < L::CHUNKS)
#pragma unroll
          for (int e = 0; e < CH; ++e) dot = fmaf(qs[chunk * CH + e], static_cast<float>(c[u][i].v[e]), dot);
      }
      for (int o = L::SUB / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const int t = base + u * L::KEYS + group;
      if (t < hi) {
        const float score = use[u] ? dot * scale : 0.f;
        if (j == 0) scores[t - lo] = score;
        if (use[u]) local_max = fmaxf(local_max, score);
      }
    }
  }
  return local_max;
}

// Each group's sum of p_t * value_t (p_t in scores[t - lo]) over its past rows lo <= t < hi, in
// partial[group * D + d].
template <int D, int CH, int NT, typename T, typename F>
__device__ __forceinline__ void past_values(const float* scores, const T* values, int lo, int hi, F attended,
                                            float* partial) {
  using L = Lanes<D, CH, NT>;
  const int group = threadIdx.x / L::SUB, j = threadIdx.x % L::SUB;
  float acc[L::PER][CH];
#pragma unroll
  for (int i = 0; i < L::PER; ++i)
#pragma unroll
    for (int e = 0; e < CH; ++e) acc[i][e] = 0.f;
  for (int base = lo; base < hi; base += L::U * L::KEYS) {
    Chunk<T, CH> c[L::U][L::PER];
    bool use[L::U];
    load_pass<D, CH, NT>(values, base, hi, attended, c, use);
#pragma unroll
    for (int u = 0; u < L::U; ++u) {
      const float p = use[u] ? scores[base + u * L::KEYS + group - lo] : 0.f;
#pragma unroll
      for (int i = 0; i < L::PER; ++i)
#pragma unroll
        for (int e = 0; e < CH; ++e) acc[i][e] = fmaf(p, static_cast<float>(c[u][i].v[e]), acc[i][e]);
    }
  }
#pragma unroll
  for (int i = 0; i < L::PER; ++i) {
    const int chunk = j + i * L::SUB;
    if (chunk < L::CHUNKS)
#pragma unroll
      for (int e = 0; e < CH; ++e) partial[group * D + chunk * CH + e] = acc[i][e];
  }
}

// The last of a query head's SPLITS blocks to finish (counted in counters[bh], which it sets back
// to 0 for the next launch) merges the splits' partial results, parts[split] = (max, sum, D sums of
// p V) over its rows: out = sum_i acc_i exp(m_i - M) / sum_i l_i exp(m_i - M), M the largest m_i.
// A split that attends no row has l_i = 0 and takes no part.
template <int D, int SPLITS, typename T>
__device__ __forceinline__ void merge_splits(int bh, bool any, int* counters, float* parts, T* out) {
  constexpr int STRIDE = D + 2;
  __shared__ int last;
  __threadfence();  // this block's parts, before its count
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + bh, 1) == SPLITS - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' parts, after their counts
  const float* all = parts + static_cast<int64_t>(bh) * SPLITS * STRIDE;
  float top = mlx_ep_cuda::negative_infinity();
  for (int i = 0; i < SPLITS; ++i)
    if (__ldcg(all + i * STRIDE + 1) > 0.f) top = fmaxf(top, __ldcg(all + i * STRIDE));
  float sum = 0.f;
  for (int i = 0; i < SPLITS; ++i) {
    const float l = __ldcg(all + i * STRIDE + 1);
    if (l > 0.f) sum += l * expf(__ldcg(all + i * STRIDE) - top);
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float y = 0.f;
    for (int i = 0; i < SPLITS; ++i) {
      const float l = __ldcg(all + i * STRIDE + 1);
      if (l > 0.f) y += __ldcg(all + i * STRIDE + 2 + d) * expf(__ldcg(all + i * STRIDE) - top);
    }
    out[static_cast<int64_t>(bh) * D + d] = any ? static_cast<T>(y / sum) : static_cast<T>(0.f);
  }
  if (threadIdx.x == 0) counters[bh] = 0;
}

// One query row's attention. SPLITS == 1: a block per (batch entry, query head) over every past
// row and the new one. SPLITS > 1: SPLITS blocks per (entry, head), block `split` over past rows
// [split * CHUNK, (split + 1) * CHUNK) (the last one also over the new row), each writing its
// partial result into `parts` for merge_splits (a step launches B x H blocks, 32 at batch 1, too few
// to keep an H100's memory busy).
template <int D, int LCAP, int ROT, bool INTERLEAVED, int NT, int SPLITS, typename T>
__device__ __forceinline__ void decode_step(const StepShape& sh, const T* q_in, const T* k_in, const T* v_in,
                                            const T* past_k, const T* past_v, const int* seqlens,
                                            const int* total_len, const T* cos_cache, const T* sin_cache,
                                            const int64_t* pos_ids, T* out, T* k_row, T* v_row, int* counters,
                                            float* parts) {
  // 16-byte loads of the past rows where D allows them and the buffers are 16-byte aligned (a
  // view into a larger allocation need not be), else one value at a time.
  constexpr int WIDE = D % (16 / sizeof(T)) == 0 ? 16 / sizeof(T) : 1;
  constexpr int GROUPS =
      Lanes<D, WIDE, NT>::KEYS > Lanes<D, 1, NT>::KEYS ? Lanes<D, WIDE, NT>::KEYS : Lanes<D, 1, NT>::KEYS;
  __shared__ float scores[LCAP];
  __shared__ float qs[D];
  __shared__ float ks[D];
  __shared__ float red[32];
  __shared__ float partial[GROUPS * D];
  const int H = sh.heads, Hkv = sh.kv_heads, P = sh.past;
  const int split = blockIdx.x % SPLITS, bh = blockIdx.x / SPLITS, b = bh / H, h = bh % H;
  const int group = H / Hkv, kvh = h / group;
  const int chunk = (P + SPLITS - 1) / SPLITS, lo = lesser(split * chunk, P), hi = lesser(lo + chunk, P);
  const bool has_new = split == SPLITS - 1;  // hi == P there
  const int tid = threadIdx.x, threads = blockDim.x;
  const StepFacts facts = step_facts(sh, seqlens, total_len, b);
  const int offset = facts.offset, end = facts.end, start = facts.start;
  const bool new_row_inside = offset >= 0 && offset < P;
  auto attended = [&](int t) {  // t < P: past row t; t == P: the new row, at `offset`
    const int at = t < P ? t : offset;
    return (t < P ? t < offset : new_row_inside) && at < end && at >= start;
  };
  const T* q_row = q_in + static_cast<int64_t>(b) * sh.q_stride + sh.q_off + h * D;
  const T* k_new = k_in + static_cast<int64_t>(b) * sh.k_stride + sh.k_off + kvh * D;
  const T* v_new = v_in + static_cast<int64_t>(b) * sh.v_stride + sh.v_off + kvh * D;
  const T *c = cos_cache, *s = sin_cache;
  rotation_rows<ROT>(sh, facts, pos_ids, b, c, s);
  const int64_t kv = static_cast<int64_t>(b) * Hkv + kvh;
  for (int d = tid; d < D; d += threads) {
    qs[d] = static_cast<float>(mlx_ep_cuda::rotated<ROT, INTERLEAVED>(q_row, c, s, d));
    const T k = mlx_ep_cuda::rotated<ROT, INTERLEAVED>(k_new, c, s, d);
    ks[d] = static_cast<float>(k);
    if (h % group == 0 && split == 0) {
      k_row[kv * D + d] = k;
      v_row[kv * D + d] = v_new[d];
    }
  }
  __syncthreads();
  const T* keys = past_k + kv * P * D;
  const T* values = past_v + kv * P * D;
  const unsigned long long bases =
      reinterpret_cast<unsigned long long>(past_k) | reinterpret_cast<unsigned long long>(past_v);
  const bool wide = WIDE > 1 && (bases & 15) == 0;
  // The passes walk only the past rows of [lo, hi) that a key mask can admit, [start, offset) (and
  // before `end`): over a buffer sized for the longest context (genai's 2,048 rows at 1,024 past)
  // they took as many passes again over rows that are never read.
  const int row_lo = lesser(lo > start ? lo : start, hi);
  const int row_hi_bound = lesser(hi, lesser(offset, end));
  const int row_hi = row_hi_bound > row_lo ? row_hi_bound : row_lo;
  float* row_scores = scores + (row_lo - lo);  // scores[t - lo] is row_scores[t - row_lo]
  float local_max = wide ? past_scores<D, WIDE, NT>(qs, keys, row_lo, row_hi, sh.scale, attended, row_scores)
                         : past_scores<D, 1, NT>(qs, keys, row_lo, row_hi, sh.scale, attended, row_scores);
  const bool new_used = has_new && attended(P);
  if (has_new && tid < 32) {  // the new row's score, by the first warp
    float dot = 0.f;
    for (int d = tid; d < D; d += 32) dot = fmaf(qs[d], ks[d], dot);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float score = new_used ? dot * sh.scale : 0.f;
    if (tid == 0) scores[P - lo] = score;
    if (new_used) local_max = fmaxf(local_max, score);
  }
  const float top = mlx_ep_cuda::block_reduce<true>(local_max, red);  // its barriers publish `scores` too
  float local_sum = 0.f;
  // The scores the passes wrote and the new row's (at P - lo); no other entry is read.
  const int rows = row_hi - row_lo;
  for (int k = tid; k < rows + (has_new ? 1 : 0); k += threads) {
    const int t = k < rows ? row_lo + k : P;
    const float p = attended(t) ? expf(scores[t - lo] - top) : 0.f;
    scores[t - lo] = p;
    local_sum += p;
  }
  const float sum = mlx_ep_cuda::block_reduce<false>(local_sum, red);  // its barriers publish `scores` too
  if (wide)
    past_values<D, WIDE, NT>(row_scores, values, row_lo, row_hi, attended, partial);
  else
    past_values<D, 1, NT>(row_scores, values, row_lo, row_hi, attended, partial);
  __syncthreads();
  const int groups = wide ? Lanes<D, WIDE, NT>::KEYS : Lanes<D, 1, NT>::KEYS;
  const bool any = start < end;  // a row attending no key is zero, as in ORT
  const float p_new = new_used ? scores[P - lo] : 0.f;
  float* part = parts + (static_cast<int64_t>(bh) * SPLITS + split) * (D + 2);
  for (int d = tid; d < D; d += threads) {
    float y = new_used ? p_new * static_cast<float>(v_new[d]) : 0.f;
    for (int g = 0; g < groups; ++g) y += partial[g * D + d];
    if (SPLITS == 1)
      out[static_cast<int64_t>(bh) * D + d] = any ? static_cast<T>(y / sum) : static_cast<T>(0.f);
    else
      part[2 + d] = y;
  }
  if (SPLITS == 1) return;
  if (tid == 0) {
    part[0] = top;
    part[1] = sum;
  }
  merge_splits<D, SPLITS>(bh, any, counters, parts, out);
}

}  // namespace mlx_ep_gqa
)";

}  // namespace

/** The kernel's header: the shared block reduction, then its own helpers. */
const std::string& GqaDecodeHeader() {
  static const std::string text = std::string(kBlockReduceSource) + kRotarySource + kHeader;
  return text;
}

}  // namespace mlx_ep
