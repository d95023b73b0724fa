// The row-normalization kernel (src/ops/normalization_cuda.cc) compiled by NVRTC as MLX's
// cuda_kernel wraps it, its text run on the host through tests/cpp/cuda_host_emulation.h against
// a double-precision reference (tests/cpp/norm_kernel_driver.inc), and the launch it plans. On a
// GPU the parity files of the normalizations run it (test_normalization, test_rms_normalization,
// test_contrib_normalization, test_fused_gpu_paths).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "mlx/ops.h"

#include "host_program.h"
#include "kernel_constants.h"
#include "ops/normalization_cuda.h"

namespace mlx_ep {
namespace {

std::string Source() { return RowNormKernelSourceForTests(); }
std::string Header() { return KernelHeader(Source()); }
std::string Body() { return KernelBody(Source()); }

constexpr const char* kEpsBits = "925353388";  // 1e-5f

// MLX's parameters for the kernel's inputs and outputs, then the constants it declares.
std::string Kernel(const std::string& name, const std::string& t, const std::string& w, const std::string& o,
                   int n, int tpb, bool simplified, bool skip, bool bias, bool beta, bool sum,
                   bool round_sum = false) {
  auto flag = [](const char* c, bool v) {
    return std::string("  constexpr bool ") + c + (v ? " = true;\n" : " = false;\n");
  };
  return "__global__ void " + name + "(const " + t + "* x, const " + t + "* skip, const " + w +
         "* bias, const " + w + "* scale, const " + w + "* beta, " + o + "* y" +
         (sum ? ", " + t + "* sum" : std::string()) + ") {\n  constexpr int N = " + std::to_string(n) +
         ";\n  constexpr int TPB = " + std::to_string(tpb) + ";\n" + flag("SIMPLIFIED", simplified) +
         flag("SKIP", skip) + flag("BIAS", bias) + flag("BETA", beta) + flag("ROUND_SUM", round_sum) +
         "  constexpr int EPS_BITS = " + kEpsBits + ";\n" +
         (sum ? std::string(RowNormSumBodyForTests()) : Body()) + "\n}\n";
}

TEST(NormKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  const struct {
    const char *t, *w, *o;
  } types[] = {{"__half", "__half", "__half"},
               {"__nv_bfloat16", "__nv_bfloat16", "__nv_bfloat16"},
               {"float", "float", "float"},
               {"float", "__half", "__half"}};
  std::map<std::string, int> threads;  // a kernel's block
  for (const auto& ty : types)
    for (int n : {768, 2048, 5000, 16384})  // up to the largest row, in blocks of 1,024
      for (bool simplified : {true, false})
        for (bool sum : {true, false}) {
          const int tpb = RowKernelThreads(n);
          std::string name = "k";
          name += std::to_string(count++);
          threads[name] = tpb;
          // With the sum the skip's sum rounded to T (an Add's output: ROUND_SUM) where simplified
          text += Kernel(name, ty.t, ty.w, ty.o, n, tpb, simplified, sum, sum, !simplified, sum,
                         sum && simplified);
        }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_norm_compile", text, threads), "");
}

TEST(NormKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  const std::string params = "const T* x, const T* skip, const W* bias, const W* scale, const W* beta, O* y";
  const std::string tmpl =
      "template <class T, class W, class O, int N, int TPB, bool SIMPLIFIED, bool SKIP, bool BIAS, bool "
      "BETA, bool ROUND_SUM>\n";
  const std::string program = "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() +
                              "constexpr int EPS_BITS = " + kEpsBits + ", kEpsBits = EPS_BITS;\n" + tmpl +
                              "void norm_kernel(" + params + ") {\n" + Body() + "\n}\n" + tmpl +
                              "void norm_sum_kernel(" + params + ", T* sum) {\n" + RowNormSumBodyForTests() +
                              "\n}\n#include \"" + (tests / "norm_kernel_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_norm_emulation", program, "g++", EmulationFlags()), "");
}

TEST(NormKernel, PlanOfTheLaunch) {
  const mx::array x = mx::zeros({2, 5, 2048}, mx::float16), w = mx::ones({2048}, mx::float16);
  const std::optional<mx::array> skip = x, none;
  auto plan = PlanRowNorm({x, skip, none, w, none, 1e-5f, true, mx::float16, true});
  ASSERT_TRUE(plan);
  const float eps = 1e-5f;
  int eps_bits = 0;
  std::memcpy(&eps_bits, &eps, sizeof eps_bits);
  std::map<std::string, int> want = {{"N", 2048}, {"TPB", 256}, {"SIMPLIFIED", 1}, {"SKIP", 1},
                                     {"BIAS", 0}, {"BETA", 0},  {"ROUND_SUM", 0},  {"EPS_BITS", eps_bits}};
  EXPECT_EQ(Ints(*plan), want);
  // An Add + LayerNormalization's sum, rounded to x's type first; no skip: nothing to round.
  want["ROUND_SUM"] = 1;
  EXPECT_EQ(Ints(*PlanRowNorm({x, skip, none, w, none, 1e-5f, true, mx::float16, true, true})), want);
  EXPECT_EQ(Ints(*PlanRowNorm({x, none, none, w, none, 1e-5f, true, mx::float16, false, true}))["ROUND_SUM"],
            0);
  EXPECT_EQ(plan->threads, 10 * 256);
  EXPECT_EQ(plan->per_block, 256);
  ASSERT_EQ(plan->output_shapes.size(), 2u);  // y and the sum
  EXPECT_EQ(plan->output_shapes[1], x.shape());
  EXPECT_EQ(plan->output_dtypes[1], mx::float16);
  ASSERT_EQ(plan->inputs.size(), 5u);
  EXPECT_EQ(plan->inputs[2].id(), w.id());  // the absent bias and beta: scale in their place
  EXPECT_EQ(plan->inputs[4].id(), w.id());

  // float32 X, float16 scale and Y (ORT's contrib LayerNorm); rows of 300 in blocks of 128.
  const mx::array x32 = mx::zeros({7, 300}, mx::float32), w16 = mx::ones({300}, mx::float16);
  const std::optional<mx::array> b16 = w16;
  plan = PlanRowNorm({x32, none, none, w16, b16, 1e-5f, false, mx::float16, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->threads, 7 * 128);
  ASSERT_EQ(plan->output_dtypes.size(), 1u);
  EXPECT_EQ(plan->output_dtypes[0], mx::float16);
  EXPECT_EQ(plan->inputs[1].id(), x32.id());  // no skip: x in its place

  // What it leaves to the other paths.
  const std::optional<mx::array> row_skip = mx::zeros({5, 2048}, mx::float16);
  EXPECT_FALSE(PlanRowNorm({x, row_skip, none, w, none, 1e-5f, true, mx::float16, false}));  // broadcast skip
  const mx::array x64 = mx::zeros({2, 8}, mx::float64), w64 = mx::ones({8}, mx::float64);
  EXPECT_FALSE(PlanRowNorm({x64, none, none, w64, none, 1e-5f, true, mx::float64, false}));
  const mx::array wide = mx::zeros({1, 16385}, mx::float32), wide_w = mx::ones({16385}, mx::float32);
  EXPECT_FALSE(PlanRowNorm({wide, none, none, wide_w, none, 1e-5f, true, mx::float32, false}));
  const mx::array empty = mx::zeros({0, 8}, mx::float32), w8 = mx::ones({8}, mx::float32);
  EXPECT_FALSE(PlanRowNorm({empty, none, none, w8, none, 1e-5f, true, mx::float32, false}));
  EXPECT_FALSE(
      PlanRowNorm({x32, none, none, w16, b16, 1e-5f, true, mx::float16, false}));  // simplified + beta
}

}  // namespace
}  // namespace mlx_ep
