// The few-rows product kernel (src/ops/matmul_rows_cuda.cc) compiled by NVRTC as MLX's cuda_kernel
// wraps it, its text run on the host through cuda_host_emulation.h against a double-precision
// reference, the launch it plans, and how it finds a gemv-layout weight. On a GPU:
// test_fused_gpu_paths.py::test_rows_product_kernel.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "mlx/ops.h"

#include "host_program.h"
#include "kernel_constants.h"
#include "ops/matmul_rows_cuda.h"

namespace mlx_ep {
namespace {

std::string Source() { return RowsProductSourceForTests(); }
std::string Header() { return KernelHeader(Source()); }
std::string Body() { return KernelBody(Source()); }

// MLX's parameters: the inputs (x with its shape and rank, w with its shape, bias), then the output.
std::string Parameters(const std::string& t) {
  return "const " + t +
         "* x, const __grid_constant__ Shape x_shape, const __grid_constant__ int x_ndim, const " + t +
         "* w, const __grid_constant__ Shape w_shape, const " + t + "* bias, " + t + "* y";
}

TEST(RowsProductKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  std::map<std::string, int> threads;
  // Every variant the EP launches: K, N and the rows are read at run time.
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (bool bias : {false, true}) {
      const std::string name = "r" + std::to_string(count++);
      threads[name] = 256;
      text += "__global__ void " + name + "(" + Parameters(t) + ") {\n  using T = " + t +
              ";\n  constexpr int MAX_ROWS = " + std::to_string(kRowsProductMaxRows) +
              ";\n  constexpr bool HAS_BIAS = " + (bias ? "true" : "false") + ";\n" + Body() + "\n}\n";
    }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_rows_product_compile", text, threads), "");
}

TEST(RowsProductKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  // Every output against a double sum rounded to T: within one unit in T's last place (the
  // float32 sums' order is the kernel's); float32 within 1e-5 relative. x at an offset of one
  // value takes the one-value loop though K holds whole 16-byte pieces (16-byte loads need aligned
  // rows).
  const std::string program = "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() +
                              "#include <cmath>\n#include <cstdio>\n#include <random>\n#include <vector>\n"
                              "template <class T, int MAX_ROWS, bool HAS_BIAS>\n"
                              "void rows_kernel(" +
                              Parameters("T") + ") {\n" + Body() + "\n}\n" + R"(
int failures = 0, checks = 0;
template <class T>
double Ulp(double v) {
  const double unit = sizeof(T) == 4 ? std::ldexp(1.0, -23) : (std::is_same_v<T, __half> ? std::ldexp(1.0, -10) : std::ldexp(1.0, -7));
  return std::max(std::ldexp(1.0, -24), unit * std::ldexp(1.0, std::ilogb(v == 0 ? 1e-30 : v)));
}
template <class T, int ROWS, int K, int N, bool HAS_BIAS>
void Check(const char* name, int offset, int ndim = 2) {
  std::mt19937 rng(ROWS * 977 + K * 31 + N + offset);
  std::uniform_real_distribution<float> value(-1.f, 1.f);
  std::vector<T> xs(size_t{ROWS} * K + 8), w(size_t{N} * K), bias(N);
  for (T& v : xs) v = static_cast<T>(value(rng));
  for (T& v : w) v = static_cast<T>(value(rng) / 8.f);
  for (T& v : bias) v = static_cast<T>(value(rng));
  const T* x = xs.data() + offset;
  // Room for 8 rows: the kernel must write x's ROWS only (the rest stays -7).
  std::vector<T> y(size_t{8} * N, static_cast<T>(-7.f));
  // x [ROWS, K] or [ROWS, 1, K] (a batch of decode steps), w [N, K]
  Shape x_shape, w_shape;
  x_shape.v[0] = ROWS, x_shape.v[ndim - 2] = ndim == 3 ? 1 : ROWS, x_shape.v[ndim - 1] = K;
  w_shape.v[0] = N, w_shape.v[1] = K;
  EmulatedLaunch((int64_t{N} * 32 + 255) / 256 * 256, 256, [&] {
    rows_kernel<T, 8, HAS_BIAS>(x, x_shape, ndim, w.data(), w_shape, bias.data(), y.data());
  });
  for (size_t i = size_t{ROWS} * N; i < y.size(); ++i)
    if (static_cast<float>(y[i]) != -7.f && failures++ < 20) std::printf("WRITTEN %s: row %zu\n", name, i / N);
  for (int r = 0; r < ROWS; ++r)
    for (int n = 0; n < N; ++n) {
      double want = HAS_BIAS ? static_cast<double>(static_cast<float>(bias[n])) : 0.0;
      for (int k = 0; k < K; ++k)
        want += static_cast<double>(static_cast<float>(x[size_t(r) * K + k])) * static_cast<float>(w[size_t(n) * K + k]);
      const double got = static_cast<float>(y[size_t(r) * N + n]);
      const double tol = sizeof(T) == 4 ? 1e-5 * std::fabs(want) + 1e-6 : 1.01 * Ulp<T>(want);
      ++checks;
      if (!(std::fabs(got - want) <= tol) && failures++ < 20)
        std::printf("MISMATCH %s [%d,%d] = %.8f, want %.8f\n", name, r, n, got, want);
    }
}
int main() {
  // Wide (16-byte loads) where K holds whole 16-byte pieces and x is aligned, one value a lane
  // otherwise: both decided at run time, as K and the rows are.
  Check<__half, 1, 64, 40, false>("float16 wide, one row: =all", 0);
  Check<__half, 2, 64, 40, false>("float16 wide", 0);
  Check<__half, 8, 136, 33, true>("float16 wide, 8 rows, bias", 0);
  Check<__half, 6, 64, 25, false>("float16 wide, x [6, 1, K]", 0, 3);
  // Every row count has its own instance of the loop (add_products_of): the rest of 1 ... 8.
  Check<__half, 3, 64, 11, false>("float16 wide, 3 rows", 0);
  Check<__half, 4, 64, 11, true>("float16 wide, 4 rows", 0);
  Check<__half, 5, 64, 11, false>("float16 wide, 5 rows", 0);
  Check<__half, 7, 64, 11, true>("float16 wide, 7 rows", 0);
  Check<__half, 3, 64, 17, false>("float16 wide, x misaligned", 1);
  Check<__half, 5, 100, 21, true>("float16 one value a lane", 0);
  Check<__nv_bfloat16, 4, 96, 19, true>("bfloat16", 0);
  Check<float, 2, 52, 23, false>("float32 wide", 0);
  Check<float, 7, 50, 9, true>("float32 one value a lane", 0);
  std::printf("checked %d values, %d mismatches\n", checks, failures);
  return failures == 0 && checks > 0 ? 0 : 1;
}
)";
  EXPECT_EQ(BuildAndRun("mlx_ep_rows_product_emulation", program, "g++", EmulationFlags()), "");
}

TEST(RowsProductKernel, PlanOfTheLaunch) {
  const int K = 64, N = 40;
  const mx::array x = mx::zeros({8, 1, K}, mx::float16), w = mx::zeros({N, K}, mx::float16);
  auto plan = PlanRowsProduct(x, w, std::nullopt);
  ASSERT_TRUE(plan);
  // One variant a dtype and bias: K, N and the rows are the kernel's to read (MLX compiles each set
  // of constants anew in every process).
  EXPECT_EQ(Ints(*plan), (std::map<std::string, int>{{"MAX_ROWS", kRowsProductMaxRows}, {"HAS_BIAS", 0}}));
  EXPECT_EQ(plan->output_shapes, (std::vector<mx::Shape>{{8, 1, N}}));
  EXPECT_EQ(plan->output_dtypes, (std::vector<mx::Dtype>{mx::float16}));
  EXPECT_EQ(plan->threads, (N * 32 + 255) / 256 * 256);
  EXPECT_EQ(plan->per_block, 256);
  auto biased = PlanRowsProduct(mx::zeros({2, 36}, mx::float32), mx::zeros({N, 36}, mx::float32),
                                mx::zeros({N}, mx::float32));
  ASSERT_TRUE(biased);
  EXPECT_EQ(Ints(*biased), (std::map<std::string, int>{{"MAX_ROWS", kRowsProductMaxRows}, {"HAS_BIAS", 1}}));
  EXPECT_EQ(biased->inputs.size(), 3u);
  // One row is planned too (taken only with ONNXRUNTIME_EP_MLX_ROWS_KERNEL=all: RowsProductByKernel).
  // Declined: nine rows, another dtype, another K, a bias of another shape.
  EXPECT_TRUE(PlanRowsProduct(mx::zeros({1, K}, mx::float16), w, std::nullopt));
  EXPECT_FALSE(PlanRowsProduct(mx::zeros({9, K}, mx::float16), w, std::nullopt));
  EXPECT_FALSE(PlanRowsProduct(mx::zeros({4, K}, mx::float32), w, std::nullopt));
  EXPECT_FALSE(PlanRowsProduct(mx::zeros({4, K + 1}, mx::float16), w, std::nullopt));
  EXPECT_FALSE(PlanRowsProduct(x, w, mx::zeros({N + 1}, mx::float16)));
  EXPECT_FALSE(PlanRowsProduct(mx::zeros({4, K}, mx::int32), mx::zeros({N, K}, mx::int32), std::nullopt));
}

TEST(RowsProductKernel, FindsTheRowMajorWeightBehindItsTransposedView) {
  const mx::array w = mx::array({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});  // data: [N, K] row-major
  const std::optional<mx::array> found = RowMajorWeightOf(mx::transpose(w, {1, 0}));
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id(), w.id());
  // Not: a computed weight (nothing evaluated behind it), the identity permutation of a square
  // one, a plain constant (row-major [K, N]), a reshape.
  EXPECT_FALSE(RowMajorWeightOf(mx::transpose(mx::add(w, w), {1, 0})));
  const mx::array square = mx::array({1.f, 2.f, 3.f, 4.f}, {2, 2});
  EXPECT_FALSE(RowMajorWeightOf(mx::transpose(square, {0, 1})));
  EXPECT_FALSE(RowMajorWeightOf(w));
  EXPECT_FALSE(RowMajorWeightOf(mx::reshape(w, {3, 2})));
}

}  // namespace
}  // namespace mlx_ep
