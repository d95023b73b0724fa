// Softmax(Q K^T scaled + mask) @ V over heads on tensor cores: a block of 4 warps takes 64 query
// rows of one head, a warp 16 of them, and runs both products as PTX's mma.sync.m16n8k16 (float16
// or bfloat16 operands, float32 accumulators; compute capability 8.0 and later). The block stages
// the head's K and V in shared memory, a chunk of keys at a time (all of BERT's 128 at once), with
// every thread's loads in flight together, so the warps' products read shared memory. Why: the
// CUDA-core kernel (attention_heads_cuda.cc, a warp a row) took 72 us a BERT-base layer on the
// thirty-sixth session's H100 (8 x 128, fp16: 12,288 rows each reading 32 KB of K and V, ~400 MB a
// layer through L2); a first tensor-core kernel that read its fragments from global memory took
// 87 us (thirty-seventh session): 768 warps of latency-bound loads one tile after another.
//
// Numerics as the CUDA-core kernel's (attention_heads_cuda.h): each score the float32 dot rounded
// to T, scaled and masked in T, the softmax in float32 (or ONNX's float16 body), P rounded to T,
// P @ V summed in float32 and rounded once to T. Three passes over the keys recompute the scores
// (the row's max, then its sum, then P and P @ V), so that no row's scores are held anywhere and
// every step sees the whole row's max and sum as the composed ops do; the products are cheap on
// tensor cores.
#include <string>

#include "ops/attention_heads_cuda_internal.h"
#include "ops/cuda_block_reduce.h"
#include "ops/cuda_score_terms.h"

namespace mlx_ep {
namespace {

// Fragments as PTX's ISA lays out mma.m16n8k16 for .f16 / .bf16 (lane = 4 g + t):
//   A (16 x 16, row-major), 4 registers of two T each: {row g, cols 2t, 2t + 1}, {row g + 8, the
//     same cols}, {row g, cols 2t + 8, 2t + 9}, {row g + 8, cols 2t + 8, 2t + 9}, low half first;
//   B (16 x 8, "col"), 2 registers: {rows 2t, 2t + 1 of col g}, {rows 2t + 8, 2t + 9 of col g};
//   C and D (16 x 8, float32): {row g, cols 2t, 2t + 1}, {row g + 8, cols 2t, 2t + 1}.
// The host emulation (tests/cpp/cuda_host_emulation.h, MLX_EP_HOST_EMULATION) computes the same
// product from these fragments.
constexpr const char* kHeader = R"(
namespace mlx_ep_heads_mma {

using mlx_ep_heads::aligned16;
using mlx_ep_heads::Terms;
using mlx_ep_scores::rounded;

template <typename T>
__device__ __forceinline__ unsigned bits_of(T x) {
  return *reinterpret_cast<const unsigned short*>(&x);
}

// Two values rounded to T in one register, `lo` in the low half.
template <typename T>
__device__ __forceinline__ unsigned pack(float lo, float hi) {
  return bits_of(static_cast<T>(lo)) | (bits_of(static_cast<T>(hi)) << 16);
}

__device__ __forceinline__ bool aligned4(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 3ull) == 0;
}

// p[0] and p[step] in one register (low half first), each zero where it is out of bounds (first,
// second false: not read); one 4-byte load where the two are adjacent and aligned.
template <typename T>
__device__ __forceinline__ unsigned load_pair(const T* p, int64_t step, bool first, bool second) {
  if (first && second && step == 1 && aligned4(p)) return __ldg(reinterpret_cast<const unsigned*>(p));
  const unsigned lo = first ? bits_of(p[0]) : 0u;
  const unsigned hi = second ? bits_of(p[step]) : 0u;
  return lo | (hi << 16);
}

#ifdef MLX_EP_HOST_EMULATION
template <typename T>
__device__ __forceinline__ void mma(float* c, const unsigned* a, const unsigned* b) {
  emulated_mma_m16n8k16<T>(c, a, b);
}
#else
// c += A B on the warp's tensor cores (float32 accumulators); volatile, as CUTLASS spells it: the
// compiler may not move a warp-synchronous instruction out of where every lane runs it.
template <typename T>
__device__ __forceinline__ void mma(float* c, const unsigned* a, const unsigned* b);

// One specialization a type; the instruction's operand type is part of its literal text.
#define MLX_EP_HEADS_MMA(T, PTX)                                                                      \
  template <>                                                                                          \
  __device__ __forceinline__ void mma<T>(float* c, const unsigned* a, const unsigned* b) {             \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX                                  \
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"              \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                      \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                  \
  }
MLX_EP_HEADS_MMA(__half, "f16")
MLX_EP_HEADS_MMA(__nv_bfloat16, "bf16")
#undef MLX_EP_HEADS_MMA
#endif

// A head's K^T and V where they are: K^T's element (d, key) at kb[d * k_d + key * k_j], V's
// (key, d) at vb[key * v_j + d * v_d].
template <typename T>
struct Head {
  const T* kb;
  const T* vb;
  int64_t k_d, k_j, v_j, v_d;
  int keys;
};

// Shared memory's chunk of keys key0 ... key0 + KC - 1: K's rows ks[key][d] (a row KS elements)
// and V^T's rows vt[d][key] (a row VS elements), zeros past the last key and past D, so that a
// B fragment's pair (two d of a key for K, two keys of a d for V) is one aligned 4-byte read; the
// rows' 16 bytes of padding put a fragment's 32 reads in 32 banks. Every thread of the block
// loads, consecutive threads along d (coalesced where d's stride is 1): 16 bytes a load where
// K's (V's) rows are packed and 16-byte aligned and D a multiple of 8, else an element a load.
template <typename T, int D, int D16, int KC>
__device__ __forceinline__ void stage(T* ks, T* vt, const Head<T>& h, int key0, bool with_v) {
  constexpr int KS = D16 + 8, VS = KC + 8, G = D16 / 8;  // G: 8-element groups a row
  const T zero = static_cast<T>(0.f);
  if (D % 8 == 0 && h.k_d == 1 && h.k_j % 8 == 0 && aligned16(h.kb)) {
#pragma unroll 4
    for (int at = threadIdx.x; at < KC * G; at += blockDim.x) {
      const int j = at / G, d = at % G * 8, key = key0 + j;
      uint4 x = {0u, 0u, 0u, 0u};
      if (key < h.keys && d < D) x = __ldg(reinterpret_cast<const uint4*>(h.kb + key * h.k_j + d));
      *reinterpret_cast<uint4*>(ks + j * KS + d) = x;
    }
  } else {
#pragma unroll 4
    for (int at = threadIdx.x; at < KC * D16; at += blockDim.x) {
      const int j = at / D16, d = at % D16, key = key0 + j;
      ks[j * KS + d] = key < h.keys && d < D ? h.kb[d * h.k_d + key * h.k_j] : zero;
    }
  }
  if (!with_v) return;
  if (D % 8 == 0 && h.v_d == 1 && h.v_j % 8 == 0 && aligned16(h.vb)) {
#pragma unroll 4
    for (int at = threadIdx.x; at < KC * G; at += blockDim.x) {
      const int j = at / G, d = at % G * 8, key = key0 + j;
      uint4 x = {0u, 0u, 0u, 0u};
      if (key < h.keys && d < D) x = __ldg(reinterpret_cast<const uint4*>(h.vb + key * h.v_j + d));
      const T* e = reinterpret_cast<const T*>(&x);
#pragma unroll
      for (int i = 0; i < 8; ++i) vt[(d + i) * VS + j] = e[i];
    }
  } else {
#pragma unroll 4
    for (int at = threadIdx.x; at < KC * D16; at += blockDim.x) {
      const int j = at / D16, d = at % D16, key = key0 + j;
      vt[d * VS + j] = key < h.keys && d < D ? h.vb[key * h.v_j + d * h.v_d] : zero;
    }
  }
}

__device__ __forceinline__ unsigned shared_pair(const void* p) { return *reinterpret_cast<const unsigned*>(p); }

// Scores of the chunk's keys 8n ... 8n + 7 (key0 + those in the head) for the warp's 16 rows, as
// C's fragment: s[0], s[1] row g's keys 8n + 2t, 8n + 2t + 1, s[2], s[3] row g + 8's; -infinity
// past the last key (exp gives 0).
template <typename T, int D16, int SCALE, bool MASK>
__device__ __forceinline__ void score_tile(float* s, const unsigned (&qa)[D16 / 16][4], const T* ks, int key0,
                                           int keys, int n, int g, int t, const Terms<T>* terms) {
  constexpr int KS = D16 + 8;
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const T* row = ks + (8 * n + g) * KS + 2 * t;
#pragma unroll
  for (int kk = 0; kk < D16 / 16; ++kk) {
    const unsigned b[2] = {shared_pair(row + 16 * kk), shared_pair(row + 16 * kk + 8)};
    mma<T>(c, qa[kk], b);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int j = key0 + 8 * n + 2 * t + (e & 1);
    const Terms<T>& r = terms[e >> 1];
    s[e] = j < keys ? mlx_ep_scores::scaled_masked<T, SCALE, MASK>(rounded<T>(c[e]), r.f, r.mask_row,
                                                                     r.mask_step, j)
                    : mlx_ep_cuda::negative_infinity();
  }
}

// A score's exp as the softmax takes it: shifted by the row's max (ONNX's float16 body rounds the
// shift and the exp to T).
template <typename T, bool BODY16>
__device__ __forceinline__ float exp_of(float s, float top) {
  float shifted = __fsub_rn(s, top);
  if (BODY16) shifted = rounded<T>(shifted);
  const float e = expf(shifted);
  return BODY16 ? rounded<T>(e) : e;
}

// Over the 4 lanes of a group (t = 0 ... 3: a row's fragments).
template <bool MAX>
__device__ __forceinline__ float group_reduce(float v) {
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = MAX ? fmaxf(v, other) : v + other;
  }
  return v;
}

}  // namespace mlx_ep_heads_mma
)";

// A block per 64 query rows of matrix m, warp w rows i0 = 64 b + 16 w ... i0 + 15; lane 4 g + t
// holds rows i0 + g and i0 + g + 8 (rows past S read zeros and are not written). Q's 16 x D tile
// stays in registers as A fragments; B fragments are read from the staged chunk. P's C fragments
// of two 8-key tiles are P @ V's A fragment for 16 keys as they are (FlashAttention-2's register
// reuse). D is padded to D16 (zeros) for the k steps. Whole warps and blocks meet the barriers
// and shuffles (mma.sync and the shuffles need every lane).
constexpr const char* kBody = R"(
  constexpr int kWarp = 32, WARPS = 4, ROWS = 16 * WARPS;
  constexpr int D16 = (D + 15) / 16 * 16, ND = (D + 7) / 8;
  constexpr int KC = D16 <= 64 ? 128 : 64;  // keys a chunk: K and V^T in ~37 KB of the 48 KB
  namespace hm = mlx_ep_heads_mma;
  // held as uint4 (16-byte aligned; T's constructors are not for __shared__)
  __shared__ uint4 ks_words[KC * (D16 + 8) / 8];
  __shared__ uint4 vt_words[D16 * (KC + 8) / 8];
  T* ks = reinterpret_cast<T*>(ks_words);
  T* vt = reinterpret_cast<T*>(vt_words);
  const int nd = q_ndim;
  const int S = q_shape[nd - 2];
  int64_t matrices = 1;
  for (int d = 0; d + 2 < nd; ++d) matrices *= q_shape[d];
  const int blocks_a_matrix = (S + ROWS - 1) / ROWS;
  if (blockIdx.x >= matrices * blocks_a_matrix) return;  // the whole block
  const int64_t m = blockIdx.x / blocks_a_matrix;
  const int lane = threadIdx.x & (kWarp - 1), warp = threadIdx.x / kWarp, g = lane >> 2, t = lane & 3;
  const int i0 = static_cast<int>(blockIdx.x % blocks_a_matrix) * ROWS + 16 * warp;
  const bool active = i0 < S;  // a warp past S still stages its share and meets the barriers
  const int rows[2] = {i0 + g, i0 + g + 8};
  const T* qb = q + mlx_ep_heads::matrix_offset(m, q_shape, q_strides, nd);
  const hm::Head<T> head{kt + mlx_ep_heads::matrix_offset(m, kt_shape, kt_strides, nd),
                         v + mlx_ep_heads::matrix_offset(m, v_shape, v_strides, nd),
                         kt_strides[nd - 2], kt_strides[nd - 1], v_strides[nd - 2], v_strides[nd - 1],
                         static_cast<int>(kt_shape[nd - 1])};
  const int64_t q_i = q_strides[nd - 2], q_d = q_strides[nd - 1];
  hm::Terms<T> terms[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)  // rows past S take the last row's (never written)
    terms[r] = mlx_ep_heads::row_terms<T, SCALE, MASK>(factor, mask, m * S + (rows[r] < S ? rows[r] : S - 1), q_shape,
                                                      nd, mask_shape, mask_strides, mask_ndim);
  unsigned qa[D16 / 16][4];
#pragma unroll
  for (int kk = 0; kk < D16 / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = rows[r & 1], d = 16 * kk + 2 * t + 8 * (r >> 1);
      const bool live = row < S;
      qa[kk][r] = hm::load_pair(qb + row * q_i + d * q_d, q_d, live && d < D, live && d + 1 < D);
    }
  const int chunks = (head.keys + KC - 1) / KC;
  int staged = -1;  // the chunk in shared memory, and whether its V is
  bool staged_v = false;
  auto stage = [&](int chunk, bool with_v) {  // the same decision in every thread of the block
    with_v = with_v || chunks == 1;  // one chunk: V with K, staged once for the three passes
    if (chunk == staged && (staged_v || !with_v)) return;
    __syncthreads();  // every warp is done with the last chunk
    hm::stage<T, D, D16, KC>(ks, vt, head, chunk * KC, with_v);
    __syncthreads();
    staged = chunk, staged_v = with_v;
  };
  float s[4], top[2] = {mlx_ep_cuda::negative_infinity(), mlx_ep_cuda::negative_infinity()};
  for (int chunk = 0; chunk < chunks; ++chunk) {
    stage(chunk, false);
    const int tiles = min(KC, head.keys - chunk * KC + 7) / 8;
    for (int n = 0; active && n < tiles; ++n) {
      hm::score_tile<T, D16, SCALE, MASK>(s, qa, ks, chunk * KC, head.keys, n, g, t, terms);
      top[0] = fmaxf(top[0], fmaxf(s[0], s[1]));
      top[1] = fmaxf(top[1], fmaxf(s[2], s[3]));
    }
  }
  float total[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) top[r] = hm::group_reduce<true>(top[r]);
  for (int chunk = chunks - 1; chunk >= 0; --chunk) {  // from the last: its chunk is still there
    stage(chunk, false);
    const int tiles = min(KC, head.keys - chunk * KC + 7) / 8;
    for (int n = 0; active && n < tiles; ++n) {
      hm::score_tile<T, D16, SCALE, MASK>(s, qa, ks, chunk * KC, head.keys, n, g, t, terms);
#pragma unroll
      for (int e = 0; e < 4; ++e) total[e >> 1] += hm::exp_of<T, BODY16>(s[e], top[e >> 1]);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    total[r] = hm::group_reduce<false>(total[r]);
    if (BODY16) total[r] = hm::rounded<T>(total[r]);
  }
  float o[ND][4];
#pragma unroll
  for (int j = 0; j < ND; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[j][e] = 0.f;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    stage(chunk, true);
    const int pairs = min(KC, head.keys - chunk * KC + 15) / 16;  // 16 keys a P @ V step
    for (int c = 0; active && c < pairs; ++c) {
      unsigned pa[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        hm::score_tile<T, D16, SCALE, MASK>(s, qa, ks, chunk * KC, head.keys, 2 * c + half, g, t, terms);
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          p[e] = hm::rounded<T>(__fdiv_rn(hm::exp_of<T, BODY16>(s[e], top[e >> 1]), total[e >> 1]));
        pa[2 * half] = hm::pack<T>(p[0], p[1]);
        pa[2 * half + 1] = hm::pack<T>(p[2], p[3]);
      }
      // B: keys 16c + 2t, + 1 and 16c + 2t + 8, + 9 of d = 8j + g, from V^T's row d
      const T* col = vt + g * (KC + 8) + 16 * c + 2 * t;
#pragma unroll
      for (int j = 0; j < ND; ++j) {
        const unsigned b[2] = {hm::shared_pair(col + 8 * j * (KC + 8)), hm::shared_pair(col + 8 * j * (KC + 8) + 8)};
        hm::mma<T>(o[j], pa, b);
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= S) continue;
    T* out_row = out + (m * S + rows[r]) * D;
#pragma unroll
    for (int j = 0; j < ND; ++j) {
      const int d = 8 * j + 2 * t;
      if (d + 1 < D && hm::aligned4(out_row + d)) {
        *reinterpret_cast<unsigned*>(out_row + d) = hm::pack<T>(o[j][2 * r], o[j][2 * r + 1]);
      } else {
        if (d < D) out_row[d] = static_cast<T>(o[j][2 * r]);
        if (d + 1 < D) out_row[d + 1] = static_cast<T>(o[j][2 * r + 1]);
      }
    }
  }
)";

}  // namespace

const std::string& HeadsMmaHeader() {
  static const std::string text =
      std::string(kBlockReduceSource) + kScoreTermsSource + kHeadsLayoutSource + kHeader;
  return text;
}

const char* HeadsMmaBody() { return kBody; }

const mx::fast::CustomKernelFunction& HeadsMmaKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_heads_attention_mma", {"q", "kt", "v", "factor", "mask"}, {"out"}, kBody,
                            HeadsMmaHeader(), /*ensure_row_contiguous=*/false);
  return kernel;
}

}  // namespace mlx_ep
