// accuracy_level 4 of MatMulNBits on the CPU (quantized_cpu.h): A quantized to int8 per block as
// MLAS's CompInt8 does (QuantizeA) and integer block dot products; the float combination follows
// MLAS's "BlkSum" kernels: y = (sum_blocks (sa * sb) * dot(qa, q) + bias) + sum_blocks (sa *
// sum(qa)) * (-sb * zp), q the unsigned stored values (MLAS adds the zero-point term, a float
// GEMM, to C last). AVX-512 VNNI for 4 bits (block_size >= 32: the two-pass kernel of
// quantized_cpu_vnni.cc; 16: VnniColumns below), 128-bit integer dots with AVX2 (2 and 4 bits),
// portable loops otherwise.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "ops/quantized_cpu_simd.h"

namespace mlx_ep {
namespace nbits_cpu {
namespace {

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

template <int Bits>
void Int8ColumnsX86(const Problem& p, int n0, int n1) {
  for (int n = n0; n < n1; ++n)
    for (int m = 0; m < p.M; ++m) Avx2Int8Column<Bits>(p, n, m);
}

#endif  // MLX_EP_NBITS_X86

}  // namespace

void RunInt8Columns(const Problem& p, int n0, int n1) {
#if defined(MLX_EP_NBITS_X86)
  if (CpuIsa() != Isa::kScalar) {
    if (p.shape.bits == 4 && p.qa_vnni && p.shape.block_size >= 32) return VnniBlockRange(p, n0, n1);
    if (p.shape.bits == 4 && p.qa_vnni) return VnniRange(p, n0, n1);
    if (p.shape.bits == 4) return Int8ColumnsX86<4>(p, n0, n1);
    if (p.shape.bits == 2) return Int8ColumnsX86<2>(p, n0, n1);
  }
#endif
  ScalarInt8(p, n0, n1);  // 8 bits: u8 x s8 pairs could saturate int16
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
  if (!CpuHasVnni() || s.bits != 4) return;
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

}  // namespace nbits_cpu
}  // namespace mlx_ep
