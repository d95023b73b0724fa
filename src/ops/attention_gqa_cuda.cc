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
// Layout: one block of NT threads (128; DecodeThreads) per (batch entry, query head). The rotated
// query and key rows in shared memory; the scores of the P + 1 keys in shared memory (up to
// kMaxKeys), block reductions for the max and the sum. The past rows, for the scores and for P V,
// are read by groups of lanes, 16 bytes a lane (Lanes: 8 lanes a float16 row of 64), eight rows a
// group in flight before their arithmetic; the groups' P V sums are added at the end with the new
// row's.
// With ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=N (opt-in) a query head's past rows are split among
// blocks of N rows (flash-decoding): B x H blocks, 32 at batch 1 on an H100's 132 SMs, read a
// layer's cache at ~24-50 GB/s a block (20 us of a layer at 512 threads); each split's block
// writes its max, sum and P V sums, and the last to finish (a count per head, in a buffer the
// node's launches share and that block sets back to zero) merges them.
// The sixteenth session's H200 run measured the first layout (each thread one key's 64 values one
// at a time for the scores, each warp a quarter of the keys one row at a time for P V, ~256
// dependent loads a warp): the GPU, not the host, was then most of a decode step.
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

#include "common/env.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "ops/attention_gqa_cuda_internal.h"
#include "ops/attention_gqa_step.h"
#include "ops/attention_internal.h"
#include "ops/cuda_block_reduce.h"
#include "ops/cuda_rotary.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kMaxKeys = 8192;  // 32 KiB of float scores in static shared memory
constexpr int kMaxHeadSize = 128;
constexpr int kMaxSharedBytes = 48 * 1024;  // static shared memory a block may declare

/** A block's threads (NT): 512, or ONNXRUNTIME_EP_MLX_DECODE_THREADS=128 or 256. A step launches
 *  only B x H blocks (32 of an H100's 132 SMs at batch 1), so a block's threads are what keeps
 *  past rows in flight: in blocks of 128 the kernel read its 1 MB of KV a layer at ~24 GB/s, 42 us
 *  (the twenty-second and twenty-seventh sessions' H100 timelines, 0.93 ms of a fp16 TinyLlama
 *  step's 2.4 ms of kernel time); blocks of 512 took the step from 5.29 to 4.25 ms (medians of
 *  two A B A B rounds, twenty-seventh session, docs/performance.md) and pass the GPU parity
 *  (twenty-fourth session). Not 1024: the kernel takes up to 94 registers a thread on sm_90a, and
 *  a block of 1024 such threads would not launch (65,536 a block; gqa_decode_kernel_test.cc). */
int DecodeThreads() {
  static const int threads = [] {
    const std::string v = EnvString(env::kDecodeThreads);
    return v == "128" ? 128 : v == "256" ? 256 : 512;
  }();
  return threads;
}

/** The header's Lanes<D, CH, NT>::U: passes of loads a thread issues before their arithmetic. */
constexpr int kRowsInFlight = 8;

/** ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=N: past rows per block (0, the default: a block per head).
 *  Not faster on the thirtieth session's H200: 25.9 us a TinyLlama layer in splits of 256 rows
 *  (20.8 unsplit on an H100): a block's chain of dependent steps sets its time, not its rows. */
int DecodeSplitRows() {
  static const int rows = [] {
    const std::string v = EnvString(env::kDecodeSplitRows);
    return !v.empty() && v.size() < 6 && v.find_first_not_of("0123456789") == std::string::npos ? std::stoi(v)
                                                                                                : 0;
  }();
  return rows;
}

/** Blocks per query head for `past` rows in blocks of `rows` (at most kMaxSplits; 1 for none). */
constexpr int kMaxSplits = 64;
int SplitsOf(int past, int rows) { return rows <= 0 ? 1 : std::min(kMaxSplits, (past + rows - 1) / rows); }

/** The header's Lanes<D, CH, NT>::KEYS: past rows a pass of the block. */
int KeysPerPass(int D, int ch, int nt) {
  const int chunks = D / ch;
  const int sub = chunks > 16 ? 32 : chunks > 8 ? 16 : chunks > 4 ? 8 : chunks > 2 ? 4 : chunks;
  return nt / sub;
}

/** decode_step's static shared memory in bytes: scores, the query and key rows, the reductions'
 *  slots and the groups' partial sums (GROUPS * D floats). */
int SharedBytes(int D, int cap, int nt, int item_size) {
  const int wide = D % (16 / item_size) == 0 ? 16 / item_size : 1;
  const int groups = std::max(KeysPerPass(D, wide, nt), KeysPerPass(D, 1, nt));
  return 4 * (cap + 2 * D + 32 + groups * D);
}

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

// The body MLX's cuda_kernel wraps: its inputs, outputs and template constants by name. Absent
// caches and position_ids are other inputs passed in their place (never read). The split kernel
// has one more input (counters, which its blocks change: see merge_splits) and output (parts).
std::string Body(bool split) {
  return std::string(R"(
  const mlx_ep_gqa::StepShape shape{H, HKV, P, MAXPOS, WINDOW, POS_STRIDE, QS, QO, KS, KO, VS, VO,
                                    __int_as_float(SCALE_BITS)};
  mlx_ep_gqa::decode_step<D, LCAP, ROT, INTERLEAVED, NT, )") +
         (split ? "SPLITS" : "1") + R"(>(shape, q_in, k_in, v_in, past_k, past_v, seqlens,
      total_len, reinterpret_cast<const T*>(cos_cache), reinterpret_cast<const T*>(sin_cache),
      reinterpret_cast<const int64_t*>(pos_ids), out, k_row, v_row, )" +
         (split ? "const_cast<int*>(counters), parts" : "nullptr, nullptr") + ");\n";
}

const mx::fast::CustomKernelFunction& StepKernel(bool split) {
  static const std::vector<std::string> inputs = {"q_in",      "k_in",    "v_in",      "past_k",
                                                  "past_v",    "seqlens", "total_len", "cos_cache",
                                                  "sin_cache", "pos_ids"};
  static const mx::fast::CustomKernelFunction whole = mx::fast::cuda_kernel(
      "mlx_ep_gqa_decode_step", inputs, {"out", "k_row", "v_row"}, Body(false), GqaDecodeHeader(),
      /*ensure_row_contiguous=*/true);
  static const mx::fast::CustomKernelFunction in_splits = [] {
    std::vector<std::string> with_counters = inputs;
    with_counters.push_back("counters");
    return mx::fast::cuda_kernel("mlx_ep_gqa_decode_split", with_counters, {"out", "k_row", "v_row", "parts"},
                                 Body(true), GqaDecodeHeader(), /*ensure_row_contiguous=*/true);
  }();
  return split ? in_splits : whole;
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

/** The kernel's header: the shared block reduction, then its own helpers. */
const std::string& GqaDecodeHeader() {
  static const std::string text = std::string(kBlockReduceSource) + kRotarySource + kHeader;
  return text;
}

std::string GqaDecodeKernelSourceForTests(bool split) {
  return GqaDecodeHeader() + "\n// kernel body:\n" + Body(split);
}

std::optional<KernelLaunch> PlanDecodeStep(const GqaDecodeStepInputs& in, int split_rows, bool grouped) {
  const mx::array &q = in.query, &past_k = in.past_key, &past_v = in.past_value;
  const int D = in.head_size, batch = q.ndim() == 3 ? q.shape(0) : 0;
  if (batch == 0 || D < 1 || D > kMaxHeadSize || in.kv_heads < 1 || in.heads % in.kv_heads != 0)
    return std::nullopt;
  const mx::Dtype t = q.dtype();
  if (!IsCudaKernelFloat(t) || past_k.dtype() != t || past_v.dtype() != t) return std::nullopt;
  const mx::Shape past_shape = {batch, in.kv_heads, past_k.ndim() == 4 ? past_k.shape(2) : 0, D};
  if (past_k.shape() != past_shape || past_v.shape() != past_shape) return std::nullopt;
  const int past = past_shape[2], keys = past + 1;
  if (past == 0 || keys > kMaxKeys) return std::nullopt;
  const std::optional<std::array<int, 6>> starts =
      q.shape(1) == 1 ? QkvRowStarts(q, in.key, in.value, in.heads, in.kv_heads, D) : std::nullopt;
  const std::optional<std::array<int, 3>> rotation = RotationConstants(in);
  if (!starts || !rotation || in.seqlens_k.size() != static_cast<size_t>(batch) ||
      in.total_length.size() != 1)
    return std::nullopt;
  // Template constants become part of the kernel's name: no minus sign (a negative scale's bits).
  int32_t scale_bits;
  std::memcpy(&scale_bits, &in.scale, sizeof scale_bits);
  if (!(in.scale > 0.f) || !std::isfinite(in.scale) || in.window < 0) return std::nullopt;
  const mx::array& placeholder = in.seqlens_k;  // for absent inputs: never read
  const auto& [rot, max_pos, pos_stride] = *rotation;
  KernelLaunch plan{
      {q, in.key ? *in.key : q, in.value ? *in.value : q, past_k, past_v, in.seqlens_k, in.total_length,
       in.cos_cache ? *in.cos_cache : placeholder, in.sin_cache ? *in.sin_cache : placeholder,
       in.position_ids ? *in.position_ids : placeholder},
      {{batch, 1, in.heads * D}, {batch, in.kv_heads, 1, D}, {batch, in.kv_heads, 1, D}},
      {t, t, t},
      0,
      0,
      {{"D", D},
       {"ROT", rot},
       {"INTERLEAVED", in.interleaved},
       {"H", in.heads},
       {"HKV", in.kv_heads},
       {"P", past},
       {"MAXPOS", max_pos},
       {"WINDOW", in.window},
       {"POS_STRIDE", pos_stride},
       {"SCALE_BITS", scale_bits},
       {"T", t}}};
  for (auto& constant : QkvRowConstants(*starts)) plan.constants.push_back(std::move(constant));
  if (grouped) return PlanGroupedDecodeStep(std::move(plan), batch, in.heads, in.kv_heads, D, past);
  const int splits = SplitsOf(past, split_rows), chunk = (past + splits - 1) / splits;
  const int cap = std::max(256, static_cast<int>(std::bit_ceil(static_cast<unsigned>(chunk + 1))));
  // The largest block up to DecodeThreads() whose static shared memory fits (128 always does:
  // kMaxKeys; long caches of wide heads take 256 or 128); in splits, the smallest whose one pass
  // of loads covers a split's rows.
  int nt = DecodeThreads();
  while (nt > 128 && SharedBytes(D, cap, nt, static_cast<int>(t.size())) > kMaxSharedBytes) nt /= 2;
  if (splits > 1) {
    const int wide = D % (16 / static_cast<int>(t.size())) == 0 ? 16 / static_cast<int>(t.size()) : 1;
    const int most = nt;
    for (nt = 128; nt < most && KeysPerPass(D, wide, nt) * kRowsInFlight < chunk;) nt *= 2;
  }
  plan.threads = batch * in.heads * splits * nt;
  plan.per_block = nt;
  plan.constants.push_back({"LCAP", cap});
  plan.constants.push_back({"NT", nt});
  if (splits > 1) {
    // Each query head's count of finished splits, zero between launches: the last block of a head
    // sets it back (merge_splits). A constant of the traced graph, so one buffer per node and
    // trace, which only this node's launches (in stream order) touch.
    const int heads = batch * in.heads;
    plan.inputs.push_back(mx::array(std::vector<int32_t>(heads, 0).data(), {heads}, mx::int32));
    plan.output_shapes.push_back({heads * splits * (D + 2)});
    plan.output_dtypes.push_back(mx::float32);
    plan.constants.push_back({"SPLITS", splits});
  }
  return plan;
}

std::optional<GqaDecodeStep> DecodeStepByKernel(const GqaDecodeStepInputs& in, mx::Stream s) {
  if (!CudaKernelsAvailable(s)) return std::nullopt;
  if (DecodeGroupedEnabled())
    if (std::optional<KernelLaunch> grouped = PlanDecodeStep(in, 0, true)) {
      const std::vector<mx::array> outs = LaunchKernel(GroupedStepKernel(), *grouped, s);
      return GqaDecodeStep{outs[0], outs[1], outs[2]};
    }
  std::optional<KernelLaunch> plan = PlanDecodeStep(in, DecodeSplitRows());
  if (!plan) return std::nullopt;
  // PlanDecodeStep names SPLITS (and adds the counters and the partial results) only for a launch
  // in blocks of past rows.
  const bool split = std::any_of(plan->constants.begin(), plan->constants.end(),
                                 [](const auto& constant) { return constant.first == "SPLITS"; });
  const std::vector<mx::array> outs = LaunchKernel(StepKernel(split), *plan, s);
  return GqaDecodeStep{outs[0], outs[1], outs[2]};
}

}  // namespace mlx_ep
