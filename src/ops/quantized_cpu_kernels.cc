// The CPU kernels of MatMulNBits (quantized_cpu.h): GEMV / small-M GEMM over ORT's packed
// weights, read in place. Each chunk of 16 stored values is unpacked and dequantized in registers
// as ORT's CPU EP dequantizes (w = (q - zp) * scale, exact integers q - zp; float zero points
// w = q * scale + (-scale * zp)) and multiplied into the rows of A in float32: ORT's float32
// result up to the order of the float sums. (Summing a block's (q - zp) * a before scaling is
// cheaper, but with cancelling terms its rounding differed from ORT's by 3e-5 relative.)
//
// accuracy_level 4 (int8 A) lives in quantized_cpu_int8.cc.
//
// x86: AVX-512 (16 lanes) and AVX2 + FMA (8 lanes) versions are compiled with target attributes
// and chosen at run time (__builtin_cpu_supports); other CPUs (arm64) get the portable loops,
// which the compiler vectorises as it can.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/quantized_cpu_simd.h"

namespace mlx_ep {
namespace nbits_cpu {
namespace {

/** A block's dequantization as w = (q - sub) * scale + add: exact (q - zp) * scale for integer
 *  zero points (add = 0), q * scale + (-scale * zp) for float ones (sub = 0), as ORT computes. */
struct Dequant {
  float sub, scale, add;
};

inline Dequant BlockDequant(const Problem& p, int n, int blk) {
  const size_t i = static_cast<size_t>(n) * p.shape.k_blocks + blk;
  const float scale = p.scales[i];
  if (p.zp_float) return {0.f, scale, -(scale * p.zp_float[i])};
  return {static_cast<float>(ZeroPoint(p, n, blk)), scale, 0.f};
}

void ScalarFloat(const Problem& p, int n0, int n1) {
  const NBitsShape& s = p.shape;
  for (int n = n0; n < n1; ++n) {
    for (int m = 0; m < p.M; ++m) {
      const float* x = p.x + static_cast<size_t>(m) * p.padded_k;
      float acc = 0.f;
      for (int blk = 0; blk < s.k_blocks; ++blk) {
        const uint8_t* blob = Blob(p, n, blk);
        const Dequant d = BlockDequant(p, n, blk);
        const float* xb = x + static_cast<size_t>(blk) * s.block_size;
        for (int i = 0; i < s.block_size; ++i)
          acc += ((static_cast<float>(Stored(blob, i, s.bits)) - d.sub) * d.scale + d.add) * xb[i];
      }
      p.y[static_cast<size_t>(m) * s.N + n] = acc + Bias(p, n);
    }
  }
}

#if defined(MLX_EP_NBITS_X86)

/** acc[r][j] += one block of 4-bit column j (its bytes from blob[j]) times row r of xb, the
 *  weights looked up in table[j]. 32 values from 16 bytes: the bytes widened to 16 lanes hold the
 *  even values in their low 4 bits and the odd ones in bits 4-7; the table lookup reads only the
 *  low 4 bits. x holds each 32 values as 16 evens then 16 odds (PrepareX). Arrays by reference
 *  and always inlined, so that the callers' accumulators stay in registers. */
template <int R, int NC>
MLX_EP_AVX512 __attribute__((always_inline)) inline void Accumulate4BitBlock(
    const Problem& p, const float* xb, const uint8_t* const (&blob)[NC], const __m512 (&table)[NC],
    __m512 (&acc)[R][NC]) {
  for (int c = 0; c < p.shape.block_size; c += 32) {
    __m512 xa[R], xc[R];
    for (int r = 0; r < R; ++r) {
      xa[r] = _mm512_loadu_ps(xb + static_cast<size_t>(r) * p.padded_k + c);
      xc[r] = _mm512_loadu_ps(xb + static_cast<size_t>(r) * p.padded_k + c + 16);
    }
    for (int j = 0; j < NC; ++j) {
      const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blob[j] + c / 2)));
      const __m512 w0 = _mm512_permutexvar_ps(q, table[j]);
      const __m512 w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table[j]);
      for (int r = 0; r < R; ++r) {
        acc[r][j] = _mm512_fmadd_ps(w0, xa[r], acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(w1, xc[r], acc[r][j]);
      }
    }
  }
}

/** NC columns from n and R rows from m0 (R * NC accumulators; the rows of A are loaded once for
 *  all NC columns). Per block and column: its weight table (2 and 4 bits) and scale. */
template <int Bits, int R, int NC>
MLX_EP_AVX512 void Avx512Columns(const Problem& p, int n, int m0) {
  const NBitsShape& s = p.shape;
  constexpr size_t blob_per_16 = 16 * Bits / 8;
  const size_t blob_bytes = static_cast<size_t>(s.block_size) * Bits / 8;
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NC; ++j) acc[r][j] = _mm512_setzero_ps();
  const uint8_t* blob[NC];
  const float* scale[NC];
  const uint8_t* zp_row[NC];
  const float* zp_float[NC];
  for (int j = 0; j < NC; ++j) {
    const size_t col = static_cast<size_t>(n + j);
    blob[j] = p.b + col * s.k_blocks * blob_bytes;
    scale[j] = p.scales + col * s.k_blocks;
    zp_row[j] = p.zp_packed ? p.zp_packed + col * p.zp_row_bytes : nullptr;
    zp_float[j] = p.zp_float ? p.zp_float + col * s.k_blocks : nullptr;
  }
  const float* x0 = p.x + static_cast<size_t>(m0) * p.padded_k;
  const NextColumns next(p, n, NC, s.k_blocks);
  for (int blk = 0; blk < s.k_blocks; ++blk) {
    next.Prefetch(blk);
    __m512 table[NC], sub[NC], mul[NC], add[NC];
    for (int j = 0; j < NC; ++j) {
      const float sc = scale[j][blk];
      // (q - zp) * scale for integer zero points, q * scale + (-scale * zp) for float ones.
      const float zp = zp_float[j] ? 0.f
                                   : static_cast<float>(zp_row[j] ? PackedZeroPoint<Bits>(zp_row[j], blk)
                                                                  : 1 << (Bits - 1));
      sub[j] = _mm512_set1_ps(zp);
      mul[j] = _mm512_set1_ps(sc);
      add[j] = _mm512_set1_ps(zp_float[j] ? -(sc * zp_float[j][blk]) : 0.f);
      if constexpr (Bits != 8) {
        table[j] = _mm512_mul_ps(_mm512_sub_ps(iota, sub[j]), mul[j]);
        if (zp_float[j]) table[j] = _mm512_add_ps(table[j], add[j]);
      }
    }
    const float* xb = x0 + static_cast<size_t>(blk) * s.block_size;
    if (Bits == 4 && s.block_size >= 32) {
      Accumulate4BitBlock<R, NC>(p, xb, blob, table, acc);
    } else {
      for (int c = 0; c < s.block_size; c += 16) {
        __m512 xa[R];
        for (int r = 0; r < R; ++r) xa[r] = _mm512_loadu_ps(xb + static_cast<size_t>(r) * p.padded_k + c);
        for (int j = 0; j < NC; ++j) {
          const __m512i q = _mm512_cvtepu8_epi32(Chunk16<Bits>(blob[j] + c / 16 * blob_per_16));
          __m512 w;
          if constexpr (Bits == 8)
            w = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(q), sub[j]), mul[j]), add[j]);
          else
            w = _mm512_permutexvar_ps(q, table[j]);
          for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(w, xa[r], acc[r][j]);
        }
      }
    }
    for (int j = 0; j < NC; ++j) blob[j] += blob_bytes;
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NC; ++j)
      p.y[static_cast<size_t>(m0 + r) * s.N + n + j] = Sum16(acc[r][j]) + Bias(p, n + j);
}

/** 4 bits, block_size >= 32, no zero points (8 for every block: the layout of onnxruntime-genai's
 *  builder, symmetric by default): per block and column acc = sum (q - 8) * x, the weights looked
 *  up in one constant table of iota - 8 (exact small integers), then y += scale * acc. So the
 *  scale multiplies once per block instead of into a new table per block and column, which cost
 *  more than the lookups at block size 32. Decode of genai_int4_b32_shared (Qwen2-0.5B shape, 2
 *  cores): one forward pass's MatMulNBits 54.5 -> 44.4 ms (bench_matmulnbits.py), the step
 *  49.1 -> 41.9 ms alone, 50.2 -> 48.8 ms beside ORT (bench_llm.py --block 5). ORT rounds
 *  each weight (q - 8) * scale and sums; this sums and then scales: the same products up to a
 *  rounding per block. x holds each 32 values as 16 evens then 16 odds. */
template <int R, int NC>
MLX_EP_AVX512 void Avx512Int4NoZeroPoints(const Problem& p, int n, int m0) {
  const NBitsShape& s = p.shape;
  const size_t blob_bytes = static_cast<size_t>(s.block_size) / 2;
  __m512 table[NC];
  for (int j = 0; j < NC; ++j) table[j] = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  __m512 total[R][NC];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NC; ++j) total[r][j] = _mm512_setzero_ps();
  const uint8_t* blob[NC];
  const float* scale[NC];
  for (int j = 0; j < NC; ++j) {
    const size_t col = static_cast<size_t>(n + j);
    blob[j] = p.b + col * s.k_blocks * blob_bytes;
    scale[j] = p.scales + col * s.k_blocks;
  }
  const float* x0 = p.x + static_cast<size_t>(m0) * p.padded_k;
  const NextColumns next(p, n, NC, s.k_blocks);
  for (int blk = 0; blk < s.k_blocks; ++blk) {
    next.Prefetch(blk);
    __m512 acc[R][NC];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < NC; ++j) acc[r][j] = _mm512_setzero_ps();
    Accumulate4BitBlock<R, NC>(p, x0 + static_cast<size_t>(blk) * s.block_size, blob, table, acc);
    for (int j = 0; j < NC; ++j) {
      const __m512 sc = _mm512_set1_ps(scale[j][blk]);
      for (int r = 0; r < R; ++r) total[r][j] = _mm512_fmadd_ps(acc[r][j], sc, total[r][j]);
      blob[j] += blob_bytes;
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NC; ++j)
      p.y[static_cast<size_t>(m0 + r) * s.N + n + j] = Sum16(total[r][j]) + Bias(p, n + j);
}

template <int Bits, int R>
__attribute__((target("avx2,fma"))) void Avx2Column(const Problem& p, int n, int m0) {
  const NBitsShape& s = p.shape;
  constexpr int chunk_bytes = 16 * Bits / 8;
  // Two accumulators, values 0-7 and 8-15 of each 16: the same partial sums as the AVX-512
  // kernel's 16 lanes (for 2 and 8 bits), and the same final reduction (Sum16 adds the halves).
  __m256 acc[R], acc_hi[R];
  for (int r = 0; r < R; ++r) acc[r] = acc_hi[r] = _mm256_setzero_ps();
  const float* x0 = p.x + static_cast<size_t>(m0) * p.padded_k;
  for (int blk = 0; blk < s.k_blocks; ++blk) {
    const uint8_t* blob = Blob(p, n, blk);
    const Dequant d = BlockDequant(p, n, blk);
    const __m256 sub = _mm256_set1_ps(d.sub), scale = _mm256_set1_ps(d.scale), add = _mm256_set1_ps(d.add);
    const float* xb = x0 + static_cast<size_t>(blk) * s.block_size;
    for (int c = 0; c < s.block_size; c += 16, blob += chunk_bytes) {
      const __m128i q = Chunk16<Bits>(blob);
      const __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
      const __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)));
      const __m256 w0 = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(q0, sub), scale), add);
      const __m256 w1 = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(q1, sub), scale), add);
      for (int r = 0; r < R; ++r) {
        const float* xr = xb + static_cast<size_t>(r) * p.padded_k + c;
        acc[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xr), acc[r]);
        acc_hi[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), acc_hi[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    p.y[static_cast<size_t>(m0 + r) * s.N + n] = Sum8(_mm256_add_ps(acc[r], acc_hi[r])) + Bias(p, n);
}

/** AVX-512: columns 4 at a time for one row (decode), 2 for two rows, else one at a time for
 *  groups of up to 4 rows. */
template <int Bits>
void Avx512Range(const Problem& p, int n0, int n1) {
  const bool no_zero_points = Bits == 4 && p.shape.block_size >= 32 && !p.zp_packed && !p.zp_float;
  for (int m = 0; m < p.M;) {
    const int rows = std::min(4, p.M - m);
    int n = n0;
    if (rows == 1 && no_zero_points)
      for (; n + 4 <= n1; n += 4) Avx512Int4NoZeroPoints<1, 4>(p, n, m);
    if (rows == 1)
      for (; n + 4 <= n1; n += 4) Avx512Columns<Bits, 1, 4>(p, n, m);
    if (rows == 2)
      for (; n + 2 <= n1; n += 2) Avx512Columns<Bits, 2, 2>(p, n, m);
    for (; n < n1; ++n) {
      switch (rows) {
        case 1:
          Avx512Columns<Bits, 1, 1>(p, n, m);
          break;
        case 2:
          Avx512Columns<Bits, 2, 1>(p, n, m);
          break;
        case 3:
          Avx512Columns<Bits, 3, 1>(p, n, m);
          break;
        default:
          Avx512Columns<Bits, 4, 1>(p, n, m);
          break;
      }
    }
    m += rows;
  }
}

/** AVX2: one column at a time for groups of up to 4 rows (each group reads the weights once). */
template <int Bits>
void Avx2Range(const Problem& p, int n0, int n1) {
  for (int n = n0; n < n1; ++n) {
    for (int m = 0; m < p.M;) {
      const int rows = std::min(4, p.M - m);
      switch (rows) {
        case 1:
          Avx2Column<Bits, 1>(p, n, m);
          break;
        case 2:
          Avx2Column<Bits, 2>(p, n, m);
          break;
        case 3:
          Avx2Column<Bits, 3>(p, n, m);
          break;
        default:
          Avx2Column<Bits, 4>(p, n, m);
          break;
      }
      m += rows;
    }
  }
}

template <int Bits>
void FloatColumnsX86(const Problem& p, int n0, int n1) {
  if (CpuIsa() == Isa::kAvx512) return Avx512Range<Bits>(p, n0, n1);
  Avx2Range<Bits>(p, n0, n1);
}

#endif  // MLX_EP_NBITS_X86

}  // namespace

void DequantizeRows(const Problem& p, int n0, int n1, float* w) {
  const NBitsShape& s = p.shape;
  for (int n = n0; n < n1; ++n) {
    float* row = w + static_cast<size_t>(n - n0) * p.padded_k;
    for (int blk = 0; blk < s.k_blocks; ++blk) {
      const uint8_t* blob = Blob(p, n, blk);
      const Dequant d = BlockDequant(p, n, blk);
      float* out = row + static_cast<size_t>(blk) * s.block_size;
      if (s.bits == 8) {
        for (int i = 0; i < s.block_size; ++i)
          out[i] = (static_cast<float>(blob[i]) - d.sub) * d.scale + d.add;
        continue;
      }
      float table[16];  // the block's possible weights
      for (int q = 0; q < 16; ++q) table[q] = (static_cast<float>(q) - d.sub) * d.scale + d.add;
      if (s.bits == 4) {
        for (int i = 0; i < s.block_size / 2; ++i) {
          out[2 * i] = table[blob[i] & 15];
          out[2 * i + 1] = table[blob[i] >> 4];
        }
      } else {
        for (int i = 0; i < s.block_size; ++i) out[i] = table[Stored(blob, i, 2)];
      }
    }
  }
}

void RunColumns(const Problem& p, int n0, int n1) {
  if (p.shape.int8_a) return RunInt8Columns(p, n0, n1);
#if defined(MLX_EP_NBITS_X86)
  if (CpuIsa() != Isa::kScalar) {
    if (p.shape.bits == 4) return FloatColumnsX86<4>(p, n0, n1);
    if (p.shape.bits == 8) return FloatColumnsX86<8>(p, n0, n1);
    return FloatColumnsX86<2>(p, n0, n1);
  }
#endif
  ScalarFloat(p, n0, n1);
}

void PrepareX(Problem& p, std::vector<float>& buffer, bool plain) {
  const NBitsShape& s = p.shape;
  bool even_odd = false;
#if defined(MLX_EP_NBITS_X86)
  even_odd = CpuIsa() == Isa::kAvx512 && s.bits == 4 && s.block_size >= 32 && !s.int8_a && !plain;
#endif
  if (!even_odd && p.padded_k == s.K) return;
  buffer.assign(static_cast<size_t>(p.M) * p.padded_k, 0.f);
  for (int m = 0; m < p.M; ++m) {
    const float* src = p.x + static_cast<size_t>(m) * s.K;
    float* dst = buffer.data() + static_cast<size_t>(m) * p.padded_k;
    if (!even_odd) {
      std::copy_n(src, s.K, dst);
      continue;
    }
    for (int k = 0; k < s.K; ++k) dst[k / 32 * 32 + (k % 2) * 16 + (k % 32) / 2] = src[k];
  }
  p.x = buffer.data();
}

const char* KernelIsa() {
#if defined(MLX_EP_NBITS_X86)
  if (CpuIsa() == Isa::kAvx512) return "avx512";
  if (CpuIsa() == Isa::kAvx2) return "avx2";
#endif
  return "scalar";
}

}  // namespace nbits_cpu
}  // namespace mlx_ep
