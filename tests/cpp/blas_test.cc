// The BLAS under MLX's CPU backend: large products run in independent parts on the EP's sleeping
// worker pool (src/blas/blas_split.c, blas_pool.c), not on OpenBLAS's spinning thread server,
// and give exact results in every layout MLX passes.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "blas/blas.h"
#include "graph_builder.h"
#include "runtime/runner.h"

namespace mlx_ep {
namespace {

/** Small integers: every product and sum below is exact in float32 and float64. */
template <typename T>
std::vector<T> SmallInts(int64_t n, int64_t prime, int mod) {
  std::vector<T> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<int>(i * prime % mod) - mod / 2);
  return v;
}

/** a [m, k] @ b [k, n] through a MatMul node, exact; each operand in its own layout (transposed:
 *  stored [k, m] / [n, k] and transposed in the graph, which MLX passes to the BLAS as a
 *  transposed operand). With `in_parts`, the product must have run in parts on the EP's pool. */
template <typename T>
void ExpectExactProduct(int64_t m, int64_t k, int64_t n, bool transpose_a, bool transpose_b, bool in_parts) {
  const ElemType type = sizeof(T) == 4 ? ElemType::kFloat : ElemType::kDouble;
  const std::vector<T> a = SmallInts<T>(m * k, 7919, 13), b = SmallInts<T>(k * n, 104729, 11);
  std::vector<T> a_in = a, b_in = b;
  if (transpose_a)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) a_in[p * m + i] = a[i * k + p];
  if (transpose_b)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) b_in[j * k + p] = b[p * n + j];
  testing::GraphBuilder builder;
  builder.Input("a", type).Input("b", type);
  if (transpose_a) builder.AddNode("Transpose", {"a"}, {"at"}, type);
  if (transpose_b) builder.AddNode("Transpose", {"b"}, {"bt"}, type);
  Graph g = builder.AddNode("MatMul", {transpose_a ? "at" : "a", transpose_b ? "bt" : "b"}, {"c"}, type)
                .Output("c")
                .Build();
  for (auto& node : g.nodes) node.since_version = 13;
  PartitionRunner runner(BuildPlan(g, "p", {"a", "b"}, {"c"}, OpRegistry::Get()), /*compile=*/true);
  const std::vector<int64_t> a_shape = transpose_a ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k};
  const std::vector<int64_t> b_shape = transpose_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
  const int64_t before = BlasPoolBatches();
  auto out = runner.Run({{type, a_shape, a_in.data()}, {type, b_shape, b_in.data()}});
  const std::string what = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n) +
                           " transpose_a " + std::to_string(transpose_a) + " transpose_b " +
                           std::to_string(transpose_b) + (sizeof(T) == 4 ? " float32" : " float64");
  if (in_parts) {
    EXPECT_GT(BlasPoolBatches(), before) << what << ": not run in parts";
  }
  ASSERT_EQ(out.size(), 1u);
  std::vector<T> c(m * n);
  ASSERT_EQ(out[0].bytes.size(), c.size() * sizeof(T));
  std::memcpy(c.data(), out[0].bytes.data(), out[0].bytes.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T want = 0;
      for (int64_t p = 0; p < k; ++p) want += a[i * k + p] * b[p * n + j];
      ASSERT_EQ(c[i * n + j], want) << what << " c[" << i << "," << j << "]";
    }
}

TEST(Blas, ParallelGemmsRunOnTheEpPool) {
  if (BlasPoolBatches() < 0) GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
  if (InspectBlasBinding().kind != "openblas") GTEST_SKIP() << "libmlx is not bound to the EP's OpenBLAS";
  ConfigureBlasThreads();  // the default policy first (once a process), then the count set here
  ASSERT_TRUE(SetBlasThreads(2));
  ExpectExactProduct<float>(384, 256, 512, false, false, /*in_parts=*/true);  // 50 M multiply-adds
  SetBlasThreads(1);
}

TEST(Blas, DefaultThreadsDropToOneWhileTheMachineIsOverloaded) {
  if (BlasPoolBatches() < 0) GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
  const int cpus = DefaultBlasThreads();
  ASSERT_TRUE(ConfigureBlasThreadsForTest(2, /*fit_to_load=*/true));
  EXPECT_EQ(BlasThreadsForLoad(0.0), 2);
  EXPECT_EQ(BlasThreadsForLoad(cpus + 0.4), 2);  // our own threads' load is not overload
  EXPECT_EQ(BlasThreadsForLoad(cpus + 0.6), 1);
  EXPECT_EQ(BlasThreadsForLoad(4.0 * cpus + 1), 1);
  SetBlasThreads(1);
  EXPECT_EQ(BlasThreadsForLoad(100.0), 1);
}

// A row times a matrix and a matrix times a column go to sgemv (blas_shim.c); exact on small
// integers, with A and B in either layout MLX passes (a transposed input is a strided view).
TEST(Blas, OneRowOrOneColumnProductsAreExact) {
  if (InspectBlasBinding().kind != "openblas") GTEST_SKIP() << "libmlx is not bound to the EP's OpenBLAS";
  for (auto [m, k, n] : {std::array<int64_t, 3>{1, 96, 200}, std::array<int64_t, 3>{200, 96, 1}})
    for (bool transpose_b : {false, true})
      ExpectExactProduct<float>(m, k, n, false, transpose_b, /*in_parts=*/false);
}

// Parts of C's columns (n >= m) and of its rows, lengths that are not multiples of the parts'
// 16-value alignment (the last part shorter), every layout, float32 and float64; and the
// one-row / one-column products, which run as matrix-vector products split over y's entries.
TEST(Blas, ProductsInPartsAreExact) {
  if (BlasPoolBatches() < 0) GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
  ConfigureBlasThreads();  // the default policy first (once a process), then the count set here
  if (InspectBlasBinding().kind != "openblas") GTEST_SKIP() << "libmlx is not bound to the EP's OpenBLAS";
  const int threads = InspectBlasBinding().threads;
  ASSERT_TRUE(SetBlasThreads(3));  // 6 parts
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      ExpectExactProduct<float>(40, 96, 1111, ta, tb, true);  // by columns: 4.3 M multiply-adds
      ExpectExactProduct<float>(1111, 96, 40, ta, tb, true);  // by rows
      ExpectExactProduct<double>(1111, 96, 40, ta, tb, true);
      ExpectExactProduct<float>(1, 600, 1901, ta, tb, true);  // matrix-vector, 1.1 M entries
      ExpectExactProduct<float>(1901, 600, 1, ta, tb, true);
    }
  SetBlasThreads(threads > 0 ? threads : 1);
}

// SgemmRowsByColumns (the int4 kernels' product: c = a @ b^T) on sub-matrices, whose row strides
// exceed their rows: each part must keep the strides of the whole.
TEST(Blas, ProductsInPartsKeepTheRowStrides) {
  if (BlasPoolBatches() < 0) GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
  ConfigureBlasThreads();  // the default policy first (once a process), then the count set here
  const int threads = InspectBlasBinding().threads;
  ASSERT_TRUE(SetBlasThreads(2));
  for (auto [m, n] : {std::array<int, 2>{48, 1000}, std::array<int, 2>{1000, 48}}) {
    const int k = 100, lda = k + 3, ldb = k + 5, ldc = n + 7;
    const std::vector<float> a = SmallInts<float>(int64_t{m} * lda, 7919, 13), b = SmallInts<float>(int64_t{n} * ldb, 104729, 11);
    std::vector<float> c(int64_t{m} * ldc, -99.f);
    const int64_t before = BlasPoolBatches();
    ASSERT_TRUE(SgemmRowsByColumns(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc));
    EXPECT_GT(BlasPoolBatches(), before) << m << "x" << n << ": not run in parts";
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < ldc; ++j) {
        float want = -99.f;  // the padding past n stays untouched
        if (j < n) {
          want = 0;
          for (int p = 0; p < k; ++p) want += a[int64_t{i} * lda + p] * b[int64_t{j} * ldb + p];
        }
        ASSERT_EQ(c[int64_t{i} * ldc + j], want) << m << "x" << n << " c[" << i << "," << j << "]";
      }
  }
  SetBlasThreads(threads > 0 ? threads : 1);
}

// A smaller count after a larger one is the count: the pool's workers stay, products do not use
// them (the pool used to report every worker it had, so 1 after 2 still split products).
TEST(Blas, FewerThreadsAfterMoreAreFewer) {
  if (BlasPoolBatches() < 0) GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
  ConfigureBlasThreads();  // the default policy first (once a process), then the count set here
  const int threads = InspectBlasBinding().threads;
  const int m = 64, n = 1024, k = 128;  // 8.4 M multiply-adds: split with 2 threads
  const std::vector<float> a = SmallInts<float>(int64_t{m} * k, 7919, 13), b = SmallInts<float>(int64_t{n} * k, 104729, 11);
  std::vector<float> c(int64_t{m} * n);
  ASSERT_TRUE(SetBlasThreads(2));
  EXPECT_EQ(InspectBlasBinding().threads, 2);
  int64_t before = BlasPoolBatches();
  SgemmRowsByColumns(m, n, k, a.data(), k, b.data(), k, c.data(), n);
  EXPECT_GT(BlasPoolBatches(), before);
  ASSERT_TRUE(SetBlasThreads(1));
  EXPECT_EQ(InspectBlasBinding().threads, 1);
  before = BlasPoolBatches();
  SgemmRowsByColumns(m, n, k, a.data(), k, b.data(), k, c.data(), n);
  EXPECT_EQ(BlasPoolBatches(), before) << "split over 2 threads after SetBlasThreads(1)";
  // Small products stay one call whatever the count.
  ASSERT_TRUE(SetBlasThreads(2));
  before = BlasPoolBatches();
  SgemmRowsByColumns(16, 1280, 73, a.data(), 73, b.data(), 73, c.data(), 1280);  // 1.5 M
  EXPECT_EQ(BlasPoolBatches(), before) << "a 1.5 M multiply-add product was split";
  SetBlasThreads(threads > 0 ? threads : 1);
}

}  // namespace
}  // namespace mlx_ep
