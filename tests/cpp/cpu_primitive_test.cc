// RowMajor (src/ops/cpu_primitive.h): the copy the EP's CPU primitives make of an input that is not
// row-contiguous when their task runs, against mx::contiguous over MLX's view kinds; and the
// softmax primitive's float32 e^ (src/ops/exp_nonpositive.h) against float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mlx/ops.h"
#include "mlx/transforms.h"
#include "ops/cpu_primitive.h"
#include "ops/exp_nonpositive.h"

namespace mlx_ep {
namespace {

void ExpectRowMajor(mx::array view, bool copied = true) {
  mx::eval(view);
  ASSERT_GT(view.size(), 0u);
  ASSERT_EQ(view.flags().row_contiguous, !copied);
  mx::array want = mx::contiguous(view);
  mx::eval(want);
  const mx::array got = RowMajor(view);
  ASSERT_TRUE(got.flags().row_contiguous);
  ASSERT_EQ(got.shape(), view.shape());
  ASSERT_EQ(got.nbytes(), want.nbytes());
  EXPECT_EQ(std::memcmp(got.data<void>(), want.data<void>(), want.nbytes()), 0);
}

TEST(RowMajor, CopiesEveryViewKind) {
  const mx::array x = mx::reshape(mx::arange(2 * 3 * 4 * 5, mx::float32), {2, 3, 4, 5});
  ExpectRowMajor(mx::transpose(x, {0, 2, 1, 3}));                                           // transposed
  ExpectRowMajor(mx::slice(x, {0, 1, 0, 2}, {2, 3, 4, 5}));                                 // sliced
  ExpectRowMajor(mx::slice(x, {0, 0, 0, 0}, {2, 3, 4, 5}, {1, 2, 1, 2}));                   // strided
  ExpectRowMajor(mx::broadcast_to(mx::reshape(mx::arange(5, mx::int64), {1, 5}), {3, 5}));  // broadcast
  ExpectRowMajor(mx::slice(x, {1, 2, 3, 4}, {-3, -4, -5, -6}, {-1, -1, -1, -1}));           // reversed
  ExpectRowMajor(mx::astype(mx::transpose(x), mx::float16));  // half, its input's strides
  ExpectRowMajor(mx::astype(x, mx::float16), false);          // row-major already: itself
  ExpectRowMajor(mx::astype(mx::transpose(x, {3, 1, 2, 0}), mx::uint8));  // one-byte items
  ExpectRowMajor(mx::slice(mx::arange(40, mx::int32), {3}, {40}, {4}));   // 1-D, strided
  ExpectRowMajor(
      mx::broadcast_to(mx::reshape(mx::arange(4, mx::float32), {4, 1}), {4, 6}));  // inner stride 0
  // Size-1 dims and dims that step as one (WalkDims): a transposed (N, C, H, 1), Magika's layout.
  const mx::array planes = mx::reshape(mx::arange(2 * 6 * 5, mx::float32), {2, 6, 5, 1});
  ExpectRowMajor(mx::transpose(planes, {0, 2, 1, 3}));
  ExpectRowMajor(mx::transpose(mx::reshape(x, {2, 1, 3, 20, 1}), {0, 4, 2, 1, 3}), false);  // only 1s moved
  ExpectRowMajor(mx::transpose(mx::reshape(x, {6, 4, 5}), {1, 0, 2}));  // (4, 6, 5): no dims merge
  ExpectRowMajor(mx::slice(mx::reshape(x, {2, 3, 4, 5, 1}), {0, 0, 0, 0, 0}, {2, 3, 4, 5, 1}, {1, 1, 2, 1, 1}));
  ExpectRowMajor(mx::transpose(mx::reshape(mx::arange(3 * 4 * 5, mx::float32), {3, 4, 5}), {2, 0, 1}));  // (5, 12)
  ExpectRowMajor(mx::broadcast_to(mx::reshape(mx::arange(4, mx::float32), {1, 4, 1}), {3, 4, 2}));
  const mx::array scalar = mx::array(3.5f);
  mx::eval(scalar);
  EXPECT_EQ(RowMajor(scalar).data<float>()[0], 3.5f);
}

// Error in units of the float32 spacing at e^t rounded (2^-149 for subnormal results).
double UlpsFromExact(float got, double exact) {
  const float rounded = static_cast<float>(exact);
  const double spacing = std::nextafter(rounded, std::numeric_limits<float>::infinity()) - double{rounded};
  return std::abs(double{got} - exact) / spacing;
}

// As the softmax primitive's loop calls it: its clones (FMA where the CPU has it); the direct
// calls below are this file's build (the baseline's arithmetic on x86-64, without FMA).
MLX_EP_CLONES void ExpNonPositiveRange(const float* t, float* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = ExpNonPositive(t[i]);
}

TEST(ExpNonPositive, WithinOneUlpOfFloat64) {
  // Every 61st float of [-104, 0] (18 million, subnormal results included), then the edges.
  std::vector<float> t;
  for (uint32_t bits = 0x80000000u; bits <= 0xC2D00000u; bits += 61) {
    t.push_back(0.0f);
    std::memcpy(&t.back(), &bits, sizeof bits);
  }
  std::vector<float> e(t.size());
  ExpNonPositiveRange(t.data(), e.data(), static_cast<int64_t>(t.size()));
  double worst = 0, worst_direct = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const double exact = std::exp(double{t[i]});
    worst = std::max(worst, UlpsFromExact(e[i], exact));
    if (i % 16 == 0) worst_direct = std::max(worst_direct, UlpsFromExact(ExpNonPositive(t[i]), exact));
  }
  // Measured here: 0.89 through the clones (FMA), 1.14 direct (every 16th of them).
  EXPECT_LT(worst, 1.2);
  EXPECT_LT(worst_direct, 1.2);
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-104.0f), 0.0f);  // e^-104 = 6.8e-46, below half the least subnormal
  EXPECT_EQ(ExpNonPositive(-1000.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(ExpNonPositive(-103.0f), static_cast<float>(std::exp(-103.0)));  // subnormal, rounded once
  EXPECT_TRUE(std::isnan(ExpNonPositive(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace mlx_ep
