// The row loops of GroupQueryAttention's CPU kernel (attention_gqa_cpu_loops.h): portable C++,
// and AVX2 / FMA / F16C chosen at run time (__builtin_cpu_supports) on x86-64.
#include "ops/attention_gqa_cpu_loops.h"

#include <algorithm>
#include <type_traits>

#include "mlx/types/half_types.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MLX_EP_GQA_X86 1
#include <cpuid.h>
#include <immintrin.h>
#define MLX_EP_GQA_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace mlx_ep {
namespace gqa_cpu {

namespace mx = mlx::core;

namespace {

template <typename T>
void ScoresScalar(const float* q, const T* k, int64_t n, int D, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const T* row = k + j * D;
    float acc = 0.f;
    for (int d = 0; d < D; ++d) acc += q[d] * Widen(row[d]);
    out[j] = acc;
  }
}

float ExpShiftScalar(float* x, int64_t n, float max) {
  float sum = 0.f;
  for (int64_t j = 0; j < n; ++j) sum += (x[j] = ExpScalar(x[j] - max));
  return sum;
}

template <typename T>
void AccumulateScalar(const float* w, const T* v, int64_t n, int D, float* y) {
  for (int64_t j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) y[d] += w[j] * Widen(v[j * D + d]);
}

#if defined(MLX_EP_GQA_X86)

template <typename T>
MLX_EP_GQA_AVX2 inline __m256 Load8(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, mx::float16_t>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {  // bfloat16: the high half of a float32
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
}

MLX_EP_GQA_AVX2 inline float Sum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/** ExpScalar on 8 lanes (the same operations, so the same results). */
MLX_EP_GQA_AVX2 inline __m256 Exp8(__m256 x0) {
  const __m256 n =
      _mm256_floor_ps(_mm256_fmadd_ps(x0, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  const __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f),
                                   _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x0));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  // Lanes outside [-88, 88] are replaced below; clamping n keeps their conversion defined.
  const __m256 n_in = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n_in), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
  y = _mm256_blendv_ps(y, x0, _mm256_cmp_ps(x0, x0, _CMP_UNORD_Q));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                       _mm256_cmp_ps(x0, _mm256_set1_ps(88.f), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x0, _mm256_set1_ps(-88.f), _CMP_LT_OQ));
}

// The AVX2 loops take D a multiple of 8 (ChooseOps).

/** The four sums of the lanes of s0 .. s3. */
MLX_EP_GQA_AVX2 inline __m128 Sum4x8(__m256 s0, __m256 s1, __m256 s2, __m256 s3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/** Scores of 8 key rows at a time (8 independent sums: the FMA latency hidden), then one by one. */
template <typename T>
MLX_EP_GQA_AVX2 void ScoresAvx2(const float* q, const T* k, int64_t n, int D, float* out) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const T* row = k + j * D;
    __m256 s[8];
    for (int r = 0; r < 8; ++r) s[r] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
      const __m256 qd = _mm256_loadu_ps(q + d);
      for (int r = 0; r < 8; ++r) s[r] = _mm256_fmadd_ps(qd, Load8(row + r * D + d), s[r]);
    }
    _mm_storeu_ps(out + j, Sum4x8(s[0], s[1], s[2], s[3]));
    _mm_storeu_ps(out + j + 4, Sum4x8(s[4], s[5], s[6], s[7]));
  }
  for (; j < n; ++j) {
    const T* row = k + j * D;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= D; d += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), Load8(row + d), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), Load8(row + d + 8), a1);
    }
    if (d < D) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), Load8(row + d), a0);
    out[j] = Sum8(_mm256_add_ps(a0, a1));
  }
}

MLX_EP_GQA_AVX2 float ExpShiftAvx2(float* x, int64_t n, float max) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), m));
    _mm256_storeu_ps(x + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = Sum8(acc);
  for (; j < n; ++j) sum += (x[j] = ExpScalar(x[j] - max));
  return sum;
}

/** y[0, 8 C) += sum_j w[j] v[j][0, 8 C): C registers of y over all rows (C independent sums). */
template <int C, typename T>
MLX_EP_GQA_AVX2 void AccumulateColumns(const float* w, const T* v, int64_t n, int D, float* y) {
  __m256 acc[C];
  for (int c = 0; c < C; ++c) acc[c] = _mm256_loadu_ps(y + 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const T* row = v + j * D;
    for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(wj, Load8(row + 8 * c), acc[c]);
  }
  for (int c = 0; c < C; ++c) _mm256_storeu_ps(y + 8 * c, acc[c]);
}

/** y[0, D) += sum_j w[j] v[j], 64 columns at a time (AccumulateColumns<C> for C = 1 .. 8). */
template <typename T>
MLX_EP_GQA_AVX2 void AccumulateAvx2(const float* w, const T* v, int64_t n, int D, float* y) {
  using Columns = void (*)(const float*, const T*, int64_t, int, float*);
  static constexpr Columns kColumns[] = {AccumulateColumns<1, T>, AccumulateColumns<2, T>, AccumulateColumns<3, T>,
                                         AccumulateColumns<4, T>, AccumulateColumns<5, T>, AccumulateColumns<6, T>,
                                         AccumulateColumns<7, T>, AccumulateColumns<8, T>};
  for (int d0 = 0; d0 < D; d0 += 64) kColumns[std::min(64, D - d0) / 8 - 1](w, v + d0, n, D, y + d0);
}

bool CpuHasAvx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c" (the
    // sanitizer build, `make fuzz-build`, did not compile).
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return yes;
}

#endif  // MLX_EP_GQA_X86

}  // namespace

template <typename T>
RowOps<T> ChooseOps(int D, bool portable) {
#if defined(MLX_EP_GQA_X86)
  if (D % 8 == 0 && !portable && CpuHasAvx2()) return {ScoresAvx2<T>, ExpShiftAvx2, AccumulateAvx2<T>};
#endif
  (void)D;
  (void)portable;
  return {ScoresScalar<T>, ExpShiftScalar, AccumulateScalar<T>};
}

template RowOps<float> ChooseOps<float>(int, bool);
template RowOps<mx::float16_t> ChooseOps<mx::float16_t>(int, bool);
template RowOps<mx::bfloat16_t> ChooseOps<mx::bfloat16_t>(int, bool);

}  // namespace gqa_cpu
}  // namespace mlx_ep
