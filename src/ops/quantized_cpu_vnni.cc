// accuracy_level 4, 4 bits, block_size >= 32, AVX-512 VNNI (quantized_cpu_int8.cc hands these over).
//
// Two passes per group of 4 columns, so that the inner loop is integer work only:
//  1. Integer dots: per span of 128 values of K, one 64-byte load per column; its low nibbles
//     (the span's even values) and high nibbles (odd values) meet qa in the same order (qa_vnni:
//     per span, 64 evens then 64 odds) in two _mm512_dpbusd_epi32. Int32 lane l then sums values
//     8l .. 8l + 7 of the span, so each 128-bit lane is one run of 32 values; a 4x4 transpose-add
//     of the 4 columns' registers gives every column's 4 sums of 32 (exact: integers), stored
//     per column. The rows of A (up to kRows) share each column's unpacked nibbles.
//  2. Float combination per column, vectorised over 16 blocks: the block dots (sums of
//     block_size / 32 entries of pass 1), y = (sum (sa * sb) * dot + bias) + sum (sa * sum(qa)) *
//     (-sb * zp): MLAS's CompInt8 formula (its zero-point term is a separate float GEMM added to C
//     last), summed in another order (the int32 dots are exact, only float rounding differs).
#include <algorithm>
#include <bit>
#include <vector>

#include "ops/quantized_cpu_simd.h"

namespace mlx_ep {
namespace nbits_cpu {

#if defined(MLX_EP_NBITS_X86)
namespace {

constexpr int kColumns = 4;  // columns per group (pass 1 transposes 4 registers)
constexpr int kRows = 4;     // rows of A per group (they share the unpacked B)

/** Sums of each run of 32 values: dots[(r * kColumns + j) * stride + k / 32] for rows m0 ..
 *  m0 + rows - 1 and columns n .. n + cols - 1 (cols 4, or fewer at the end: those registers
 *  multiply zeros). */
MLX_EP_VNNI void Dots32(const Problem& p, int n, int cols, int m0, int rows, int32_t* dots, int stride) {
  const size_t row_bytes = static_cast<size_t>(p.shape.k_blocks) * p.shape.block_size / 2;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // Output position 4j + t takes the sum of column j's 128-bit lane t (at 4t + j after the adds).
  const __m512i to_columns = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int k0 = 0; k0 < p.padded_k; k0 += 128) {
    const int bytes = std::min(64, (p.padded_k - k0) / 2);
    const __mmask64 mask = bytes == 64 ? ~__mmask64{0} : ((__mmask64{1} << bytes) - 1);
    __m512i lo[kColumns], hi[kColumns];
    for (int j = 0; j < kColumns; ++j) {
      const __m512i v = j < cols ? _mm512_maskz_loadu_epi8(mask, p.b + (n + j) * row_bytes + k0 / 2)
                                 : _mm512_setzero_si512();
      lo[j] = _mm512_and_si512(v, low4);
      hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
    for (int r = 0; r < rows; ++r) {
      const int8_t* qa = p.qa_vnni + static_cast<size_t>(m0 + r) * p.qa_vnni_stride + k0;
      const __m512i a_even = _mm512_loadu_si512(qa), a_odd = _mm512_loadu_si512(qa + 64);
      __m512i s[kColumns];
      for (int j = 0; j < kColumns; ++j)
        s[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[j], a_even), hi[j], a_odd);
      // Per 128-bit lane: t01 = (s0 0+2, s1 0+2, s0 1+3, s1 1+3), then (sum s0, s1, s2, s3).
      const __m512i t01 =
          _mm512_add_epi32(_mm512_unpacklo_epi32(s[0], s[1]), _mm512_unpackhi_epi32(s[0], s[1]));
      const __m512i t23 =
          _mm512_add_epi32(_mm512_unpacklo_epi32(s[2], s[3]), _mm512_unpackhi_epi32(s[2], s[3]));
      const __m512i sums = _mm512_permutexvar_epi32(
          to_columns, _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23)));
      int32_t* out = dots + static_cast<size_t>(r) * kColumns * stride + k0 / 32;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_castsi512_si128(sums));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + stride), _mm512_extracti32x4_epi32(sums, 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * stride), _mm512_extracti32x4_epi32(sums, 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 3 * stride), _mm512_extracti32x4_epi32(sums, 3));
    }
  }
}

/** The dots of blocks blk .. blk + 15 from the sums of 32 (block_size / 32 = 1 << Levels of them
 *  per block; the buffer has zeros past the last block). */
template <int Levels>
MLX_EP_VNNI inline __m512i BlockDots(const int32_t* d32, int blk) {
  if constexpr (Levels == 0) return _mm512_loadu_si512(d32 + blk);
  const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  __m512i v[1 << Levels];
  for (int i = 0; i < (1 << Levels); ++i)
    v[i] = _mm512_loadu_si512(d32 + ((static_cast<size_t>(blk) << Levels) + 16 * i));
  for (int width = 1 << Levels; width > 1; width /= 2)
    for (int i = 0; i < width / 2; ++i)
      v[i] = _mm512_add_epi32(_mm512_permutex2var_epi32(v[2 * i], evens, v[2 * i + 1]),
                              _mm512_permutex2var_epi32(v[2 * i], odds, v[2 * i + 1]));
  return v[0];
}

/** Per 128-bit lane t: (sum of v[0]'s lane t, v[1]'s, v[2]'s, v[3]'s). */
MLX_EP_VNNI inline __m512 LaneSums4(const __m512* v) {
  const __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
  const __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))),
                       _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))));
}

/** (sum of v[0], ..., sum of v[3]). */
MLX_EP_VNNI inline __m128 Sums4(const __m512* v) {
  const __m512 lanes = LaneSums4(v);
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(lanes),
                                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(lanes), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
}

/** The zero points of blocks blk .. blk + count - 1 (count <= 16, blk even) of column col as
 *  floats: the packed 4-bit ones, or ORT's default 8. */
MLX_EP_VNNI inline __m512 ZeroPoints16(const Problem& p, size_t col, int blk, int count) {
  if (!p.zp_packed) return _mm512_set1_ps(8.f);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __mmask16 zp_bytes = static_cast<__mmask16>((1u << ((count + 1) / 2)) - 1);
  const __m128i v = _mm_maskz_loadu_epi8(zp_bytes, p.zp_packed + col * p.zp_row_bytes + blk / 2);
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
      _mm_unpacklo_epi8(_mm_and_si128(v, low4), _mm_and_si128(_mm_srli_epi16(v, 4), low4))));
}

/** -scale_b * zp of blocks 0 .. kb - 1 of columns n .. n + kColumns - 1 (past cols: the last
 *  column again, as CombineColumns reads them) at out[j * padded_kb + blk], zeros past kb: the
 *  zero-point factors that every row of A multiplies, which pass 2 computed again for each row
 *  (the same operations, so the same values). */
MLX_EP_VNNI void NegScaledZeroPoints(const Problem& p, int n, int cols, float* out, int padded_kb) {
  const int kb = p.shape.k_blocks;
  for (int j = 0; j < kColumns; ++j) {
    const size_t col = static_cast<size_t>(n + std::min(j, cols - 1));
    for (int blk = 0; blk < kb; blk += 16) {
      const int count = std::min(16, kb - blk);
      const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
      const __m512 scale_b = _mm512_maskz_loadu_ps(mask, p.scales + col * kb + blk);
      const __m512 zp = ZeroPoints16(p, col, blk, count);
      _mm512_storeu_ps(out + static_cast<size_t>(j) * padded_kb + blk,
                       _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), scale_b), zp));
    }
  }
}

/** y[m, n .. n + cols - 1] from the sums of 32 of row m, columns n .. (pass 2; `dots` holds
 *  kColumns rows of `stride`, those past cols unused; `neg_scaled_zps` from NegScaledZeroPoints). */
template <int Levels>
MLX_EP_VNNI void CombineColumns(const Problem& p, int n, int cols, int m, const int32_t* dots, int stride,
                                const float* neg_scaled_zps, int padded_kb) {
  const int kb = p.shape.k_blocks;
  const float* sa = p.a_scale + static_cast<size_t>(m) * kb;
  const float* a_blksum = p.a_blksum + static_cast<size_t>(m) * kb;
  __m512 acc[kColumns], zp_part[kColumns];
  for (int j = 0; j < kColumns; ++j) acc[j] = zp_part[j] = _mm512_setzero_ps();
  for (int blk = 0; blk < kb; blk += 16) {
    const int count = std::min(16, kb - blk);
    const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
    const __m512 scale_a = _mm512_maskz_loadu_ps(mask, sa + blk);
    const __m512 blksum = _mm512_maskz_loadu_ps(mask, a_blksum + blk);
    for (int j = 0; j < kColumns; ++j) {
      const size_t col = static_cast<size_t>(n + std::min(j, cols - 1));  // past cols: computed, not stored
      const __m512 scale_b = _mm512_maskz_loadu_ps(mask, p.scales + col * kb + blk);
      const __m512 dot = _mm512_cvtepi32_ps(BlockDots<Levels>(dots + j * static_cast<size_t>(stride), blk));
      acc[j] = _mm512_fmadd_ps(dot, _mm512_mul_ps(scale_a, scale_b), acc[j]);
      const __m512 neg_scaled_zp = _mm512_loadu_ps(neg_scaled_zps + static_cast<size_t>(j) * padded_kb + blk);
      zp_part[j] = _mm512_fmadd_ps(blksum, neg_scaled_zp, zp_part[j]);
    }
  }
  float y[kColumns], zp_sum[kColumns];
  _mm_storeu_ps(y, Sums4(acc));
  _mm_storeu_ps(zp_sum, Sums4(zp_part));
  for (int j = 0; j < cols; ++j)  // MLAS adds the zero-point GEMM to C last
    p.y[static_cast<size_t>(m) * p.shape.N + n + j] = (y[j] + Bias(p, n + j)) + zp_sum[j];
}

/** sum over blocks of a_blksum * (-scale_b * zp) for row m, column col: MLAS's zero-point term. */
MLX_EP_VNNI float ZeroPointTerm(const Problem& p, size_t col, int m) {
  const int kb = p.shape.k_blocks;
  const float* a_blksum = p.a_blksum + static_cast<size_t>(m) * kb;
  __m512 part = _mm512_setzero_ps();
  for (int blk = 0; blk < kb; blk += 16) {
    const int count = std::min(16, kb - blk);
    const __mmask16 mask = static_cast<__mmask16>((1u << count) - 1);
    const __m512 scale_b = _mm512_maskz_loadu_ps(mask, p.scales + col * kb + blk);
    const __m512 zp = ZeroPoints16(p, col, blk, count);
    const __m512 neg_scaled_zp = _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), scale_b), zp);
    part = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, a_blksum + blk), neg_scaled_zp, part);
  }
  return _mm512_reduce_add_ps(part);
}

/** One row of A (decode): columns n .. n + cols - 1 in one pass. Int32 lane l of a span's
 *  dpbusd sums values 8l .. 8l + 7, so 128-bit lane t is one run of 32 values, inside block
 *  (k0 / 32 + t) >> Levels: each lane is converted and multiplied by its block's scale_a * scale_b
 *  into a float accumulator, with no store of the sums of 32 and no second pass. The int32 partial
 *  sums are exact; the float sum runs over sums of 8 instead of MLAS's whole blocks (rounding
 *  only). Against Dots32 + CombineColumns: one forward pass's MatMulNBits (Qwen2-0.5B shape, block
 *  32) 42.3 -> 40.2 ms, a decode step 44.1 -> 43.2 ms: little, because it waits on memory, not
 *  on its instructions; NextColumns' prefetch of the next group is what moved it (12.7 -> 17-18
 *  GB/s on two cores streaming, a decode step about 15% faster). */
template <int Levels>
MLX_EP_VNNI void DecodeColumns(const Problem& p, int n, int cols) {
  const int kb = p.shape.k_blocks;
  const size_t row_bytes = static_cast<size_t>(kb) * p.shape.block_size / 2;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // The block of lane t relative to the span's first block: t >> Levels (one block for >= 128).
  const __m512i lane_block =
      _mm512_srli_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), Levels);
  constexpr int kSpanBlocks = Levels >= 2 ? 1 : 4 >> Levels;  // blocks one span of 128 touches
  // Without zero points (8 for every block) the zero-point term accumulates here too, per span:
  // blksum * scale_b over the span's blocks; with packed ones ZeroPointTerm reads them after.
  const bool default_zp = p.zp_packed == nullptr;
  __m512 acc[kColumns], zp_acc[kColumns];
  for (int j = 0; j < kColumns; ++j) acc[j] = zp_acc[j] = _mm512_setzero_ps();
  const NextColumns next(p, n, kColumns, (p.padded_k + 127) / 128);
  for (int k0 = 0; k0 < p.padded_k; k0 += 128) {
    next.Prefetch(k0 / 128);
    const int bytes = std::min(64, (p.padded_k - k0) / 2);
    const __mmask64 mask = bytes == 64 ? ~__mmask64{0} : ((__mmask64{1} << bytes) - 1);
    const int blk0 = (k0 / 32) >> Levels;
    // A span starts a block of 256 only every other time (Levels 3): its blocks count once.
    const bool new_block = Levels < 3 || (k0 / 128) % 2 == 0;
    const __mmask16 blocks = static_cast<__mmask16>((1u << std::min(kSpanBlocks, kb - blk0)) - 1);
    const __m512 scale_a = _mm512_maskz_loadu_ps(blocks, p.a_scale + blk0);
    const __m512 blksum = _mm512_maskz_loadu_ps(new_block ? blocks : 0, p.a_blksum + blk0);
    const __m512i a_even = _mm512_loadu_si512(p.qa_vnni + k0),
                  a_odd = _mm512_loadu_si512(p.qa_vnni + k0 + 64);
    for (int j = 0; j < kColumns; ++j) {
      // Past cols: column n + cols - 1 again (computed, not stored), so no branch in the loop.
      const size_t col = static_cast<size_t>(n + std::min(j, cols - 1));
      const __m512i v = _mm512_maskz_loadu_epi8(mask, p.b + col * row_bytes + k0 / 2);
      const __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      const __m512i dot =
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a_even), hi, a_odd);
      const __m512 scale_b = _mm512_maskz_loadu_ps(blocks, p.scales + col * kb + blk0);
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                               _mm512_permutexvar_ps(lane_block, _mm512_mul_ps(scale_a, scale_b)), acc[j]);
      zp_acc[j] = _mm512_fmadd_ps(blksum, scale_b, zp_acc[j]);
    }
  }
  float y[kColumns], zp_sum[kColumns];
  _mm_storeu_ps(y, Sums4(acc));
  _mm_storeu_ps(zp_sum, Sums4(zp_acc));
  for (int j = 0; j < cols; ++j) {  // MLAS adds the zero-point GEMM to C last
    const size_t col = static_cast<size_t>(n + j);
    p.y[col] = (y[j] + Bias(p, n + j)) + (default_zp ? -8.f * zp_sum[j] : ZeroPointTerm(p, col, 0));
  }
}

}  // namespace

template <int Levels>
void VnniBlockRangeOf(const Problem& p, int n0, int n1) {
  constexpr int levels = Levels;  // block_size = 32 << Levels
  if (p.M == 1) {
    for (int n = n0; n < n1; n += kColumns) DecodeColumns<Levels>(p, n, std::min(kColumns, n1 - n));
    return;
  }
  const int spans = (p.padded_k + 127) / 128;
  // A row of sums of 32: 4 per span, then zeros up to a whole number of BlockDots loads.
  const int stride = std::max(spans * 4, (p.shape.k_blocks + 15) / 16 * 16 << levels);
  std::vector<int32_t> dots(static_cast<size_t>(kRows) * kColumns * stride, 0);
  const int padded_kb = (p.shape.k_blocks + 15) / 16 * 16;
  std::vector<float> neg_scaled_zps(static_cast<size_t>(kColumns) * padded_kb);
  for (int n = n0; n < n1; n += kColumns) {
    const int cols = std::min(kColumns, n1 - n);
    NegScaledZeroPoints(p, n, cols, neg_scaled_zps.data(), padded_kb);
    for (int m = 0; m < p.M; m += kRows) {
      const int rows = std::min(kRows, p.M - m);
      Dots32(p, n, cols, m, rows, dots.data(), stride);
      for (int r = 0; r < rows; ++r)
        CombineColumns<Levels>(p, n, cols, m + r, dots.data() + static_cast<size_t>(r) * kColumns * stride,
                               stride, neg_scaled_zps.data(), padded_kb);
    }
  }
}

void VnniBlockRange(const Problem& p, int n0, int n1) {
  switch (p.shape.block_size) {
    case 32:
      return VnniBlockRangeOf<0>(p, n0, n1);
    case 64:
      return VnniBlockRangeOf<1>(p, n0, n1);
    case 128:
      return VnniBlockRangeOf<2>(p, n0, n1);
    default:
      return VnniBlockRangeOf<3>(p, n0, n1);  // 256
  }
}

#endif  // MLX_EP_NBITS_X86

}  // namespace nbits_cpu
}  // namespace mlx_ep
