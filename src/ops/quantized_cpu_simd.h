// Helpers shared by the MatMulNBits CPU kernels (quantized_cpu_kernels.cc: float32 math,
// quantized_cpu_int8.cc: accuracy_level 4): ORT's packing, x86 SIMD pieces, CPU detection.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

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

inline int ZeroPoint(const Problem& p, int n, int blk) {
  const int bits = p.shape.bits;
  if (!p.zp_packed) return 1 << (bits - 1);  // ORT's default: the middle of the range
  const int per_byte = 8 / bits;
  const uint8_t byte = p.zp_packed[static_cast<size_t>(n) * p.zp_row_bytes + blk / per_byte];
  return (byte >> ((blk % per_byte) * bits)) & ((1 << bits) - 1);
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

inline float Bias(const Problem& p, int n) { return p.bias ? p.bias[n] : 0.f; }

/** accuracy_level 4's columns (quantized_cpu_int8.cc); RunColumns hands them over. */
void RunInt8Columns(const Problem& p, int n0, int n1);

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

#define MLX_EP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/** The weights and scales of the columns after a group, prefetched in equal shares while the
 *  group runs. Decode reads every weight once, from memory, and the hardware prefetchers left the
 *  level-4 kernel waiting on misses: 6.6 GB/s on one core, 12.7 GB/s on two (a 2-core Sapphire
 *  Rapids VM that reads 14-19 GB/s on two). Those columns come next in memory (ORT's layout: a
 *  column's blocks, column after column), so their addresses are known a group early: 17-18 GB/s
 *  on two cores with this (medians of an interleaved A/B, bench/nbits_stream_bench.cc; runs
 *  move by 20% on this machine). The float kernels (level 0) gain little: they are bound by
 *  their lookups and multiply-adds. */
class NextColumns {
 public:
  /** The `columns` columns after those from n, in `parts` shares (nothing past the last column). */
  NextColumns(const Problem& p, int n, int columns, int parts) {
    const int next = n + columns, count = std::max(0, std::min(columns, p.shape.N - next));
    const size_t row_bytes = static_cast<size_t>(p.shape.k_blocks) * p.shape.block_size * p.shape.bits / 8;
    if (count > 0) {  // else no lines, and no pointer past the arrays
      weights_ = reinterpret_cast<const char*>(p.b + static_cast<size_t>(next) * row_bytes);
      scales_ = reinterpret_cast<const char*>(p.scales + static_cast<size_t>(next) * p.shape.k_blocks);
    }
    weight_lines_ = (row_bytes * count + 63) / 64;
    scale_lines_ = (sizeof(float) * p.shape.k_blocks * count + 63) / 64;
    weight_share_ = (weight_lines_ + parts - 1) / parts;
    scale_share_ = (scale_lines_ + parts - 1) / parts;
  }

  /** Prefetches share `part` (0 .. parts - 1). */
  void Prefetch(int part) const {
    Lines(weights_, weight_lines_, weight_share_, part);
    Lines(scales_, scale_lines_, scale_share_, part);
  }

 private:
  static void Lines(const char* base, size_t lines, size_t share, int part) {
    const size_t begin = share * part, end = std::min(lines, begin + share);
    // Not _mm_prefetch: GCC deletes a loop of nothing but __builtin_prefetch (C++'s finite
    // loops at -O2), and the prefetches with it.
    for (size_t line = begin; line < end; ++line) asm volatile("prefetcht0 %0" : : "m"(base[line * 64]));
  }

  const char* weights_ = nullptr;
  const char* scales_ = nullptr;
  size_t weight_lines_, scale_lines_, weight_share_, scale_share_;
};

enum class Isa { kScalar, kAvx2, kAvx512 };

/** The widest kernel set this CPU runs (AVX-512 needs F, BW, VL and FMA).
 *  ONNXRUNTIME_EP_MLX_NBITS_ISA=avx2|scalar narrows it (tests of the other kernels). */
inline Isa CpuIsa() {
  static const Isa isa = [] {
    const char* forced = std::getenv("ONNXRUNTIME_EP_MLX_NBITS_ISA");
    const std::string narrow = forced ? forced : "";
    __builtin_cpu_init();
    if (narrow == "scalar") return Isa::kScalar;
    if (narrow == "avx2")
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::kAvx2 : Isa::kScalar;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
      return Isa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return isa;
}

/** accuracy_level 4, 4 bits, block_size >= 32 on AVX-512 VNNI (quantized_cpu_vnni.cc). */
void VnniBlockRange(const Problem& p, int n0, int n1);

/** AVX-512 VNNI (the level-4 int4 kernel's dpbusd). */
inline bool CpuHasVnni() {
  static const bool vnni = CpuIsa() == Isa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  return vnni;
}

#endif  // MLX_EP_NBITS_X86

}  // namespace nbits_cpu
}  // namespace mlx_ep
