// RowMajor (src/ops/cpu_primitive.h): the copy the EP's CPU primitives make of an input that is not
// row-contiguous when their task runs, against mx::contiguous over MLX's view kinds.
#include <gtest/gtest.h>

#include <cstring>

#include "mlx/ops.h"
#include "mlx/transforms.h"
#include "ops/cpu_primitive.h"

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
  const mx::array scalar = mx::array(3.5f);
  mx::eval(scalar);
  EXPECT_EQ(RowMajor(scalar).data<float>()[0], 3.5f);
}

}  // namespace
}  // namespace mlx_ep
