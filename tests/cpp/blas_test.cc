// The BLAS under MLX's CPU backend: parallel GEMMs run on the EP's sleeping worker pool
// (src/blas/blas_pool.c), not on OpenBLAS's spinning thread server, and give exact results.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "blas/blas.h"
#include "graph_builder.h"
#include "runtime/runner.h"

namespace mlx_ep {
namespace {

TEST(Blas, ParallelGemmsRunOnTheEpPool) {
  if (BlasPoolBatches() < 0) GTEST_SKIP() << "built without scipy-openblas32 (or not on Linux)";
  if (InspectBlasBinding().kind != "openblas") GTEST_SKIP() << "libmlx is not bound to the EP's OpenBLAS";
  const int64_t m = 384, k = 256, n = 512;  // large enough for OpenBLAS to split over 2 threads
  std::vector<float> a(m * k), b(k * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i * 7919 % 13) - 6);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i * 104729 % 11) - 5);
  Graph g =
      testing::GraphBuilder().Input("a").Input("b").AddNode("MatMul", {"a", "b"}, {"c"}).Output("c").Build();
  g.nodes[0].since_version = 13;  // MatMul's latest version
  PartitionRunner runner(BuildPlan(g, "p", {"a", "b"}, {"c"}, OpRegistry::Get()), /*compile=*/true);

  ASSERT_TRUE(SetBlasThreads(2));
  const int64_t before = BlasPoolBatches();
  auto out = runner.Run({{ElemType::kFloat, {m, k}, a.data()}, {ElemType::kFloat, {k, n}, b.data()}});
  const int64_t after = BlasPoolBatches();
  SetBlasThreads(1);

  EXPECT_GT(after, before) << "the GEMM did not run in parallel on the EP's pool";
  ASSERT_EQ(out.size(), 1u);
  std::vector<float> c(m * n);
  std::memcpy(c.data(), out[0].bytes.data(), out[0].bytes.size());
  for (int64_t i = 0; i < m; i += 37) {  // small integers: every product and sum is exact
    for (int64_t j = 0; j < n; j += 41) {
      float want = 0;
      for (int64_t p = 0; p < k; ++p) want += a[i * k + p] * b[p * n + j];
      ASSERT_EQ(c[i * n + j], want) << "c[" << i << "," << j << "]";
    }
  }
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
  for (auto [m, k, n] : {std::array<int64_t, 3>{1, 96, 200}, std::array<int64_t, 3>{200, 96, 1}}) {
    for (bool transpose_b : {false, true}) {
      std::vector<float> a(m * k), b(k * n);
      for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i * 7919 % 13) - 6);
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i * 104729 % 11) - 5);
      // B given as [n, k] and transposed in the graph when transpose_b: MLX sees a strided view.
      std::vector<float> b_in = b;
      if (transpose_b)
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j) b_in[j * k + p] = b[p * n + j];
      testing::GraphBuilder builder;
      builder.Input("a").Input("b");
      if (transpose_b) builder.AddNode("Transpose", {"b"}, {"bt"});
      Graph g = builder.AddNode("MatMul", {"a", transpose_b ? "bt" : "b"}, {"c"}).Output("c").Build();
      for (auto& node : g.nodes) node.since_version = 13;
      PartitionRunner runner(BuildPlan(g, "p", {"a", "b"}, {"c"}, OpRegistry::Get()), /*compile=*/true);
      const std::vector<int64_t> b_shape = transpose_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
      auto out = runner.Run({{ElemType::kFloat, {m, k}, a.data()}, {ElemType::kFloat, b_shape, b_in.data()}});
      ASSERT_EQ(out.size(), 1u);
      std::vector<float> c(m * n);
      std::memcpy(c.data(), out[0].bytes.data(), out[0].bytes.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float want = 0;
          for (int64_t p = 0; p < k; ++p) want += a[i * k + p] * b[p * n + j];
          ASSERT_EQ(c[i * n + j], want) << m << "x" << k << "x" << n << " transpose_b " << transpose_b;
        }
    }
  }
}

}  // namespace
}  // namespace mlx_ep
