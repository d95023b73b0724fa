// The CPU kernels of MatMulNBits (quantized_cpu.h): GEMV / small-M GEMM over ORT's packed
// weights, read in place. Each chunk of 16 stored values is unpacked and dequantized in registers
// as ORT's CPU EP dequantizes (w = (q - zp) * scale, exact integers q - zp; float zero points
// w = q * scale + (-scale * zp)) and multiplied into the rows of A in float32: ORT's float32
// result up to the order of the float sums. (Summing a block's (q - zp) * a before scaling is
// cheaper, but with cancelling terms its rounding differed from ORT's by 3e-5 relative.)
//
// accuracy_level 4 (int8_a): A was quantized per block to int8 (QuantizeA, MLAS's formula) and
// the block dot products are integers; the float combination follows MLAS's CompInt8 "BlkSum"
// kernels: y = sum_blocks (sa * sb) * dot(qa, q) + sum_blocks (sa * sum(qa)) * (-sb * zp), q the
// unsigned stored values.
//
// x86: AVX-512 (16 lanes) and AVX2 + FMA (8 lanes) versions are compiled with target attributes
// and chosen at run time (__builtin_cpu_supports); other CPUs (arm64) get the portable loops,
// which the compiler vectorises as it can.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/quantized_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MLX_EP_NBITS_X86 1
#include <immintrin.h>
// GCC 12's AVX-512 headers start some conversions from _mm512_undefined_*() and warn about it.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace mlx_ep {
namespace nbits_cpu {
namespace {

inline int ZeroPoint(const Problem& p, int n, int blk) {
  const int bits = p.shape.bits;
  if (!p.zp_packed) return 1 << (bits - 1);  // ORT's default: the middle of the range
  const int per_byte = 8 / bits;
  const uint8_t byte = p.zp_packed[static_cast<size_t>(n) * p.zp_row_bytes + blk / per_byte];
  return (byte >> ((blk % per_byte) * bits)) & ((1 << bits) - 1);
}

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

/** Element i of a block (low bits first within each byte, ORT's packing). */
inline int Stored(const uint8_t* blob, int i, int bits) {
  if (bits == 8) return blob[i];
  if (bits == 4) return (blob[i / 2] >> ((i & 1) * 4)) & 15;
  return (blob[i / 4] >> ((i & 3) * 2)) & 3;
}

inline const uint8_t* Blob(const Problem& p, int n, int blk) {
  const size_t blob = static_cast<size_t>(p.shape.block_size) * p.shape.bits / 8;
  return p.b + (static_cast<size_t>(n) * p.shape.k_blocks + blk) * blob;
}

float Bias(const Problem& p, int n) { return p.bias ? p.bias[n] : 0.f; }

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

void ScalarInt8(const Problem& p, int n0, int n1) {
  const NBitsShape& s = p.shape;
  for (int n = n0; n < n1; ++n) {
    for (int m = 0; m < p.M; ++m) {
      const int8_t* qa = p.qa + static_cast<size_t>(m) * p.padded_k;
      float acc = 0.f, zp_part = 0.f;
      for (int blk = 0; blk < s.k_blocks; ++blk) {
        const uint8_t* blob = Blob(p, n, blk);
        const int8_t* qb = qa + static_cast<size_t>(blk) * s.block_size;
        int32_t dot = 0;
        for (int i = 0; i < s.block_size; ++i) dot += Stored(blob, i, s.bits) * qb[i];
        const float sb = p.scales[static_cast<size_t>(n) * s.k_blocks + blk];
        const size_t ab = static_cast<size_t>(m) * s.k_blocks + blk;
        acc += static_cast<float>(dot) * (p.a_scale[ab] * sb);
        zp_part += p.a_blksum[ab] * (-sb * static_cast<float>(ZeroPoint(p, n, blk)));
      }
      p.y[static_cast<size_t>(m) * s.N + n] =
          (acc + Bias(p, n)) + zp_part;  // MLAS adds the zero-point GEMM to C last
    }
  }
}

#if defined(MLX_EP_NBITS_X86)

/** 16 stored values of a chunk (bytes in element order). */
template <int Bits>
__attribute__((target("avx2"))) inline __m128i Chunk16(const uint8_t* p) {
  if constexpr (Bits == 8) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else if constexpr (Bits == 4) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(v, mask), _mm_and_si128(_mm_srli_epi16(v, 4), mask));
  } else {
    uint32_t word;
    std::memcpy(&word, p, 4);
    const __m128i v = _mm_cvtsi32_si128(static_cast<int>(word));
    const __m128i mask = _mm_set1_epi8(0x03);
    const __m128i f0 = _mm_and_si128(v, mask), f1 = _mm_and_si128(_mm_srli_epi16(v, 2), mask);
    const __m128i f2 = _mm_and_si128(_mm_srli_epi16(v, 4), mask),
                  f3 = _mm_and_si128(_mm_srli_epi16(v, 6), mask);
    // (e0 e1)(e4 e5).. and (e2 e3)(e6 e7)..: interleaving the pairs gives e0 e1 e2 e3 ...
    return _mm_unpacklo_epi16(_mm_unpacklo_epi8(f0, f1), _mm_unpacklo_epi8(f2, f3));
  }
}

__attribute__((target("avx2,fma"))) inline float Sum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

__attribute__((target("avx512f,avx2,fma"))) inline float Sum16(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return Sum8(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}

#define MLX_EP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

/** Zero point of block `blk` from a row of packed zero points (Bits known: shifts, no division). */
template <int Bits>
inline int PackedZeroPoint(const uint8_t* row, int blk) {
  constexpr int per_byte = 8 / Bits;
  return (row[blk / per_byte] >> ((blk % per_byte) * Bits)) & ((1 << Bits) - 1);
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
  for (int blk = 0; blk < s.k_blocks; ++blk) {
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
      // 32 values from 16 bytes: the bytes widened to 16 lanes hold the even values in their
      // low 4 bits and the odd ones in bits 4-7; the table lookup reads only the low 4 bits.
      // x holds each 32 values as 16 evens then 16 odds (PrepareX).
      for (int c = 0; c < s.block_size; c += 32) {
        __m512 xa[R], xc[R];
        for (int r = 0; r < R; ++r) {
          xa[r] = _mm512_loadu_ps(xb + static_cast<size_t>(r) * p.padded_k + c);
          xc[r] = _mm512_loadu_ps(xb + static_cast<size_t>(r) * p.padded_k + c + 16);
        }
        for (int j = 0; j < NC; ++j) {
          const __m512i q =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blob[j] + c / 2)));
          const __m512 w0 = _mm512_permutexvar_ps(q, table[j]);
          const __m512 w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table[j]);
          for (int r = 0; r < R; ++r) {
            acc[r][j] = _mm512_fmadd_ps(w0, xa[r], acc[r][j]);
            acc[r][j] = _mm512_fmadd_ps(w1, xc[r], acc[r][j]);
          }
        }
      }
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

template <int Bits, int R>
__attribute__((target("avx2,fma"))) void Avx2Column(const Problem& p, int n, int m0) {
  const NBitsShape& s = p.shape;
  constexpr int chunk_bytes = 16 * Bits / 8;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
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
        acc[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xr + 8), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) p.y[static_cast<size_t>(m0 + r) * s.N + n] = Sum8(acc[r]) + Bias(p, n);
}

/** accuracy_level 4: integer block dots (u8 x s8 pairs in int16: at most 2 * 15 * 127, no saturation). */
template <int Bits>
__attribute__((target("avx2,fma"))) void Avx2Int8Column(const Problem& p, int n, int m) {
  const NBitsShape& s = p.shape;
  constexpr int chunk_bytes = 16 * Bits / 8;
  const int8_t* qa = p.qa + static_cast<size_t>(m) * p.padded_k;
  const __m128i ones = _mm_set1_epi16(1);
  float acc = 0.f, zp_part = 0.f;
  for (int blk = 0; blk < s.k_blocks; ++blk) {
    const uint8_t* blob = Blob(p, n, blk);
    const int8_t* qb = qa + static_cast<size_t>(blk) * s.block_size;
    __m128i dot4 = _mm_setzero_si128();
    for (int c = 0; c < s.block_size; c += 16, blob += chunk_bytes) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + c));
      dot4 = _mm_add_epi32(dot4, _mm_madd_epi16(_mm_maddubs_epi16(Chunk16<Bits>(blob), a), ones));
    }
    dot4 = _mm_add_epi32(dot4, _mm_shuffle_epi32(dot4, 0x4E));
    dot4 = _mm_add_epi32(dot4, _mm_shuffle_epi32(dot4, 0xB1));
    const int32_t dot = _mm_cvtsi128_si32(dot4);
    const float sb = p.scales[static_cast<size_t>(n) * s.k_blocks + blk];
    const size_t ab = static_cast<size_t>(m) * s.k_blocks + blk;
    acc += static_cast<float>(dot) * (p.a_scale[ab] * sb);
    zp_part += p.a_blksum[ab] * (-sb * static_cast<float>(ZeroPoint(p, n, blk)));
  }
  p.y[static_cast<size_t>(m) * s.N + n] =
      (acc + Bias(p, n)) + zp_part;  // MLAS adds the zero-point GEMM to C last
}

#define MLX_EP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/** MLAS's zero-point term of column n, row m: sum over blocks of (sa * sum(qa)) * (-sb * zp), 16
 *  blocks at a time (zp 8 without zero points). */
MLX_EP_VNNI inline float ZeroPointPart(const Problem& p, int n, int m) {
  const int kb = p.shape.k_blocks;
  const float* sb = p.scales + static_cast<size_t>(n) * kb;
  const float* a_blksum = p.a_blksum + static_cast<size_t>(m) * kb;
  const uint8_t* zp_row = p.zp_packed ? p.zp_packed + static_cast<size_t>(n) * p.zp_row_bytes : nullptr;
  __m512 part = _mm512_setzero_ps();
  for (int blk = 0; blk < kb; blk += 16) {
    const int count = std::min(16, kb - blk);
    const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
    __m512 zp = _mm512_set1_ps(8.f);
    if (zp_row) {
      uint8_t bytes[8] = {};
      std::memcpy(bytes, zp_row + blk / 2, static_cast<size_t>((count + 1) / 2));
      zp = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(Chunk16<4>(bytes)));
    }
    const __m512 neg_scaled_zp =
        _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(mask, sb + blk)), zp);
    part = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a_blksum + blk), neg_scaled_zp, part);
  }
  return Sum16(part);
}

/** accuracy_level 4, 4 bits, AVX-512 VNNI. Per span of 128 values of K (64 bytes of a column):
 *  the low nibbles (the span's even values) and the high nibbles (odd values) are two registers
 *  that _mm512_dpbusd_epi32 multiplies with qa in the same order (qa_vnni: per span, 64 evens
 *  then 64 odds). Int32 lane l then sums values 8l .. 8l + 7 of the span, all of one block
 *  (block (8l) / block_size of the span): the lane's sum is scaled by that block's sa * sb. The
 *  last span may be partial (masked loads; qa_vnni is zero there). */
template <int NC>
MLX_EP_VNNI void VnniColumns(const Problem& p, int n, int m) {
  const int bs = p.shape.block_size, kb = p.shape.k_blocks;
  const size_t blob_bytes = static_cast<size_t>(bs) / 2;
  const int8_t* qa = p.qa_vnni + static_cast<size_t>(m) * p.qa_vnni_stride;
  const float* sa = p.a_scale + static_cast<size_t>(m) * kb;
  const int per_span = std::max(1, 128 / bs);
  const __m512i lane_block =
      _mm512_srli_epi32(_mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120),
                        std::countr_zero(static_cast<unsigned>(bs)));
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NC];
  for (int j = 0; j < NC; ++j) acc[j] = _mm512_setzero_ps();
  for (int k0 = 0; k0 < p.padded_k; k0 += 128) {
    const int bytes = std::min(64, (p.padded_k - k0) / 2);
    const __mmask64 mask = bytes == 64 ? ~__mmask64{0} : ((__mmask64{1} << bytes) - 1);
    const int blk0 = k0 / bs;
    const __mmask8 blocks = static_cast<__mmask8>((1u << std::min(per_span, kb - blk0)) - 1);
    const __m512i a_even = _mm512_loadu_si512(qa + k0), a_odd = _mm512_loadu_si512(qa + k0 + 64);
    const __m512 sa_lanes =
        _mm512_permutexvar_ps(lane_block, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(blocks, sa + blk0)));
    for (int j = 0; j < NC; ++j) {
      const size_t col = static_cast<size_t>(n + j) * kb;
      const __m512i v = _mm512_maskz_loadu_epi8(mask, p.b + col * blob_bytes + k0 / 2);
      const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      const __m512i d =
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a_even), hi, a_odd);
      const __m512 sb_lanes = _mm512_permutexvar_ps(
          lane_block, _mm512_castps256_ps512(_mm256_maskz_loadu_ps(blocks, p.scales + col + blk0)));
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(sa_lanes, sb_lanes), acc[j]);
    }
  }
  for (int j = 0; j < NC; ++j)
    p.y[static_cast<size_t>(m) * p.shape.N + n + j] =
        (Sum16(acc[j]) + Bias(p, n + j)) + ZeroPointPart(p, n + j, m);
}

void VnniRange(const Problem& p, int n0, int n1) {
  for (int m = 0; m < p.M; ++m) {
    int n = n0;
    for (; n + 4 <= n1; n += 4) VnniColumns<4>(p, n, m);
    for (; n < n1; ++n) VnniColumns<1>(p, n, m);
  }
}

bool HasVnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

const bool kVnni = HasVnni();

enum class Isa { kScalar, kAvx2, kAvx512 };

Isa DetectIsa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
  return Isa::kScalar;
}

const Isa kIsa = DetectIsa();

/** Rows in groups of up to 4: each group reads the column's weights once. */
/** AVX-512: columns 4 at a time for one row (decode), 2 for two rows, else one at a time for
 *  groups of up to 4 rows. */
template <int Bits>
void Avx512Range(const Problem& p, int n0, int n1) {
  for (int m = 0; m < p.M;) {
    const int rows = std::min(4, p.M - m);
    int n = n0;
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
  if (kIsa == Isa::kAvx512) return Avx512Range<Bits>(p, n0, n1);
  Avx2Range<Bits>(p, n0, n1);
}

template <int Bits>
void Int8ColumnsX86(const Problem& p, int n0, int n1) {
  for (int n = n0; n < n1; ++n)
    for (int m = 0; m < p.M; ++m) Avx2Int8Column<Bits>(p, n, m);
}

#endif  // MLX_EP_NBITS_X86

}  // namespace

void DequantizeRows(const Problem& p, int n0, int n1, float* w) {
  const NBitsShape& s = p.shape;
  for (int n = n0; n < n1; ++n) {
    float* row = w + static_cast<size_t>(n) * p.padded_k;
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
#if defined(MLX_EP_NBITS_X86)
  if (kIsa != Isa::kScalar) {
    const int bits = p.shape.bits;
    if (p.shape.int8_a) {
      if (bits == 4 && p.qa_vnni) return VnniRange(p, n0, n1);
      if (bits == 4) return Int8ColumnsX86<4>(p, n0, n1);
      if (bits == 2) return Int8ColumnsX86<2>(p, n0, n1);
      return ScalarInt8(p, n0, n1);  // 8 bits: u8 x s8 pairs could saturate int16
    }
    if (bits == 4) return FloatColumnsX86<4>(p, n0, n1);
    if (bits == 8) return FloatColumnsX86<8>(p, n0, n1);
    return FloatColumnsX86<2>(p, n0, n1);
  }
#endif
  if (p.shape.int8_a) return ScalarInt8(p, n0, n1);
  ScalarFloat(p, n0, n1);
}

void QuantizeA(const float* x, int M, int padded_k, int block_size, int8_t* qa, float* a_scale,
               float* a_blksum) {
  const int k_blocks = padded_k / block_size;
  for (int m = 0; m < M; ++m) {
    for (int blk = 0; blk < k_blocks; ++blk) {
      const size_t off = static_cast<size_t>(m) * padded_k + static_cast<size_t>(blk) * block_size;
      float amax = 0.f;
      for (int i = 0; i < block_size; ++i) amax = std::max(amax, std::fabs(x[off + i]));
      // MLAS: scale = amax / 127 and, separately, inverse = 127 / amax (not 1 / scale: the two
      // differ in the last bit, which moves values that land on a half to the other side).
      const float scale = amax / 127.f;
      const float inverse = amax != 0.f ? 127.f / amax : 0.f;
      int32_t sum = 0;
      for (int i = 0; i < block_size; ++i) {
        const int q = static_cast<int>(std::nearbyint(x[off + i] * inverse));  // half to even
        qa[off + i] = static_cast<int8_t>(q);
        sum += q;
      }
      a_scale[static_cast<size_t>(m) * k_blocks + blk] = scale;
      a_blksum[static_cast<size_t>(m) * k_blocks + blk] = scale * static_cast<float>(sum);
    }
  }
}

void PrepareX(Problem& p, std::vector<float>& buffer) {
  const NBitsShape& s = p.shape;
  bool even_odd = false;
#if defined(MLX_EP_NBITS_X86)
  even_odd = kIsa == Isa::kAvx512 && s.bits == 4 && s.block_size >= 32 && !s.int8_a;
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

void PrepareInt8A(Problem& p, Int8A& a) {
  const NBitsShape& s = p.shape;
  a.qa.resize(static_cast<size_t>(p.M) * p.padded_k);
  a.a_scale.resize(static_cast<size_t>(p.M) * s.k_blocks);
  a.a_blksum.resize(a.a_scale.size());
  QuantizeA(p.x, p.M, p.padded_k, s.block_size, a.qa.data(), a.a_scale.data(), a.a_blksum.data());
  p.qa = a.qa.data();
  p.a_scale = a.a_scale.data();
  p.a_blksum = a.a_blksum.data();
#if defined(MLX_EP_NBITS_X86)
  if (!kVnni || s.bits != 4) return;
  const int stride = (p.padded_k + 127) / 128 * 128;
  a.qa_vnni.assign(static_cast<size_t>(p.M) * stride, 0);
  for (int m = 0; m < p.M; ++m) {
    const int8_t* src = a.qa.data() + static_cast<size_t>(m) * p.padded_k;
    int8_t* dst = a.qa_vnni.data() + static_cast<size_t>(m) * stride;
    for (int k = 0; k < p.padded_k; ++k) dst[k / 128 * 128 + (k % 2) * 64 + (k % 128) / 2] = src[k];
  }
  p.qa_vnni = a.qa_vnni.data();
  p.qa_vnni_stride = stride;
#endif
}

const char* KernelIsa() {
#if defined(MLX_EP_NBITS_X86)
  if (kIsa == Isa::kAvx512) return "avx512";
  if (kIsa == Isa::kAvx2) return "avx2";
#endif
  return "scalar";
}

}  // namespace nbits_cpu
}  // namespace mlx_ep
