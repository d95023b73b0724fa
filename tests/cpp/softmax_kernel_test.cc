// The row (Log)Softmax kernel (src/ops/softmax_cuda.cc) compiled by NVRTC as MLX's cuda_kernel
// wraps it, its text run on the host through tests/cpp/cuda_host_emulation.h against a
// double-precision reference of the composed translation (tests/cpp/softmax_kernel_driver.inc),
// and the launch it plans. On a GPU, test_fused_gpu_paths.py::test_softmax_kernel runs the
// normalization file's Softmax cases with it.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "mlx/ops.h"

#include "host_program.h"
#include "kernel_constants.h"
#include "ops/softmax_cuda.h"

namespace mlx_ep {
namespace {

std::string Source() { return RowSoftmaxKernelSourceForTests(); }
std::string Header() { return KernelHeader(Source()); }
std::string Body() { return KernelBody(Source()); }

// MLX's parameters for the kernel's inputs (x and the mask with their shapes and ranks, the body
// names them; the scale factor one value, rank 0) and output, then the constants it declares.
std::string Kernel(const std::string& name, const std::string& t, int tpb, bool log, bool body16, int scale,
                   bool mask) {
  auto flag = [](const char* c, bool v) {
    return std::string("  constexpr bool ") + c + (v ? " = true;\n" : " = false;\n");
  };
  return "__global__ void " + name + "(const " + t +
         "* x, const __grid_constant__ Shape x_shape, const __grid_constant__ int x_ndim, const " + t +
         "* factor, const " + t +
         "* mask, const __grid_constant__ Shape mask_shape, const __grid_constant__ int "
         "mask_ndim, " +
         t + "* y) {\n  constexpr int PER = " + std::to_string(RowKernelValuesPerThread(tpb)) +
         ";\n  constexpr int TPB = " + std::to_string(tpb) +
         ";\n  constexpr int SCALE = " + std::to_string(scale) + ";\n" + flag("LOG", log) +
         flag("BODY16", body16) + flag("MASK", mask) + Body() + "\n}\n";
}

TEST(SoftmaxKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  std::map<std::string, int> threads;  // a kernel's block
  // Every block size (the row's length is read at run time: one kernel a block size and form).
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int tpb : {32, 64, 128, 256, 512, 1024})
      for (int variant = 0; variant < 3; ++variant) {
        const bool log = variant == 1, body16 = variant == 2;
        if (body16 && std::string(t) != "__half") continue;
        for (int scale : {0, 1, 2}) {
          std::string name = "k";  // not "k" + ...: GCC 12's -Wrestrict false positive
          name += std::to_string(count++);
          threads[name] = tpb;
          text += Kernel(name, t, tpb, log, body16, scale, scale != 1);
        }
      }
  text += kMlxKernelsEnd;
  // Every block launches: 16 values a thread in blocks of 1,024 fit a block's registers.
  EXPECT_EQ(CompileLikeMlx("mlx_ep_softmax_compile", text, threads), "");
}

TEST(SoftmaxKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  // The plan's values a thread (RowKernelValuesPerThread) for the driver, which g++ builds alone.
  std::string per_thread = "constexpr int PerThreadOf(int tpb) {\n";
  for (const auto& [longest, tpb] : kRowKernelBlocks)
    per_thread += "  if (tpb == " + std::to_string(tpb) + ") return " +
                  std::to_string(RowKernelValuesPerThread(tpb)) + ";\n";
  per_thread += "  return 0;\n}\n";
  const std::string program =
      "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() + per_thread +
      "template <class T, int PER, int TPB, bool LOG, bool BODY16, int SCALE, bool MASK>\n"
      "void softmax_kernel(const T* x, Shape x_shape, int x_ndim, const T* factor, const T* "
      "mask, Shape mask_shape, int mask_ndim, T* y) {\n" +
      Body() + "\n}\n#include \"" + (tests / "softmax_kernel_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_softmax_emulation", program, "g++", EmulationFlags()), "");
}

TEST(SoftmaxKernel, PlanOfTheLaunch) {
  // BERT-base's scores: [8, 12, 128, 128] float16, Softmax-13's body.
  const mx::array scores = mx::zeros({8, 12, 128, 128}, mx::float16);
  auto plan = PlanRowSoftmax({scores, false, true});
  ASSERT_TRUE(plan);
  const std::map<std::string, int> want = {{"PER", 8},    {"TPB", 128}, {"LOG", 0},
                                           {"BODY16", 1}, {"SCALE", 0}, {"MASK", 0}};
  EXPECT_EQ(Ints(*plan), want);
  EXPECT_EQ(plan->threads, 8 * 12 * 128 * 128);
  EXPECT_EQ(plan->per_block, 128);
  ASSERT_EQ(plan->inputs.size(), 3u);
  EXPECT_EQ(plan->inputs[0].id(), scores.id());  // and in the absent factor's and mask's places
  EXPECT_EQ(plan->inputs[1].id(), scores.id());
  EXPECT_EQ(plan->inputs[2].id(), scores.id());
  ASSERT_EQ(plan->output_shapes.size(), 1u);
  EXPECT_EQ(plan->output_shapes[0], scores.shape());
  EXPECT_EQ(plan->output_dtypes[0], mx::float16);

  // One kernel for every row length of a block size (a decode step's rows grow by one): the
  // constants of rows of 129 and of 1,024 are those of 128, and every length fits its block's.
  EXPECT_EQ(Ints(*PlanRowSoftmax({mx::zeros({8, 12, 128, 129}, mx::float16), false, true})), want);
  EXPECT_EQ(Ints(*PlanRowSoftmax({mx::zeros({2, 1024}, mx::float16), false, true})), want);
  for (int n = 1; n <= kMaxKernelRow; ++n) {
    const int tpb = RowKernelThreads(n);
    ASSERT_LE(n, tpb * RowKernelValuesPerThread(tpb)) << n;
    ASSERT_LE(RowKernelValuesPerThread(tpb), 16) << n;  // registers: CompilesLikeMlx's blocks
  }

  // bfloat16 LogSoftmax rows of 3,000 in blocks of 256; rows of 20 in one warp.
  plan = PlanRowSoftmax({mx::zeros({5, 3000}, mx::bfloat16), true, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->threads, 5 * 256);
  EXPECT_EQ(Ints(*plan)["LOG"], 1);
  plan = PlanRowSoftmax({mx::zeros({3, 20}, mx::float32), false, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->per_block, 32);

  // Attention's scores (softmax_scores.h): s * k + mask, as traced in float16, reads s, k and the
  // mask as it was before its broadcast; a float16 s / k traced in float32 and rounded once.
  const mx::array s16 = mx::zeros({2, 3, 4, 16}, mx::float16), k16 = mx::array(0.125f, mx::float16);
  const mx::array mask = mx::zeros({2, 1, 1, 16}, mx::float16);
  plan = PlanRowSoftmax({mx::add(mx::multiply(s16, k16), mask), false, true});
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan)["SCALE"], 2);
  EXPECT_EQ(Ints(*plan)["MASK"], 1);
  ASSERT_EQ(plan->inputs.size(), 3u);
  EXPECT_EQ(plan->inputs[0].id(), s16.id());
  EXPECT_EQ(plan->inputs[1].id(), k16.id());
  EXPECT_EQ(plan->inputs[2].id(), mask.id());
  EXPECT_EQ(plan->output_shapes[0], s16.shape());
  const mx::array divided =
      mx::astype(mx::divide(mx::astype(s16, mx::float32), mx::astype(k16, mx::float32)), mx::float16);
  plan = PlanRowSoftmax({mx::add(mask, divided), false, true});
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan)["SCALE"], 1);
  EXPECT_EQ(plan->inputs[0].id(), s16.id());
  EXPECT_EQ(plan->inputs[1].id(), k16.id());
  // A rank-0 mask goes as [1] (MLX passes the shapes of arrays of rank > 0 only); a row made of
  // anything else (a k / s is no scaling) is read as it is.
  plan = PlanRowSoftmax({mx::add(s16, mx::array(-1.f, mx::float16)), false, true});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->inputs[2].shape(), mx::Shape{1});
  const mx::array inverted = mx::divide(mx::array(2.f), mx::zeros({3, 16}, mx::float32));
  plan = PlanRowSoftmax({inverted, false, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan)["SCALE"], 0);
  EXPECT_EQ(plan->inputs[0].id(), inverted.id());

  // What it leaves to the composed paths.
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({2, 8}, mx::float64), false, false}));
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({2, 50257}, mx::float32), false, false}));  // vocabulary rows
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({0, 8}, mx::float32), false, false}));
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({2, 8}, mx::float32), false, true}));   // the body is float16's
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({2, 8}, mx::float16), true, true}));    // and Softmax's
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({2, 8}, mx::int32), false, false}));
  // MLX passes shapes of up to 10 dims
  EXPECT_FALSE(PlanRowSoftmax({mx::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8}, mx::float32), false, false}));
}

}  // namespace
}  // namespace mlx_ep
