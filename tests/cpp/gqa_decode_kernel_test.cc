// GroupQueryAttention's decode kernel (src/ops/attention_gqa_cuda.cc) compiled by nvcc and run on
// the host through tests/cpp/cuda_host_emulation.h against a double-precision softmax
// (tests/cpp/gqa_decode_driver.inc). Its GPU parity: test_group_query_attention.py with
// ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "host_program.h"
#include "ops/fused_gpu_internal.h"

namespace mlx_ep {
namespace {

std::string Source() { return GqaDecodeKernelSourceForTests(); }
std::string Header() { return Source().substr(0, Source().find("// kernel body:")); }
std::string Body() { return Source().substr(Source().find("// kernel body:")); }

// The parameters MLX's cuda_kernel generates for the body (inputs, their shapes where the body
// names them, the output).
std::string Parameters(const std::string& t) {
  return "const " + t + "* q, const Shape q_shape, const " + t +
         "* past_k, const Shape past_k_shape, const " + t + "* past_v, const " + t + "* k_new, const " + t +
         "* v_new, const bool* allowed, float* out";
}

TEST(GqaDecodeKernel, Compiles) {
  const std::string nvcc = FindNvcc();
  if (nvcc.empty()) GTEST_SKIP() << "no nvcc";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int d : {64, 80, 96, 128})
      for (int cap : {256, 8192})
        text += "__global__ void k" + std::to_string(count++) + "(" + Parameters(t) +
                ") {\n  constexpr int D = " + std::to_string(d) +
                ";\n  constexpr int LCAP = " + std::to_string(cap) +
                ";\n  constexpr int SCALE_BITS = 1040187392;\n  using T = " + t + ";\n" + Body() + "\n}\n";
  text += kMlxKernelsEnd;
  EXPECT_EQ(BuildAndRun("mlx_ep_gqa_decode_compile", text, nvcc, kNvccCompileFlags, /*run_it=*/false), "");
}

TEST(GqaDecodeKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  const std::string program = "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() +
                              "template <int D, int LCAP, class T>\nvoid decode_kernel(" + Parameters("T") +
                              ", int SCALE_BITS) {\n" + Body() + "\n}\n#include \"" +
                              (tests / "gqa_decode_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_gqa_decode_emulation", program, "g++", EmulationFlags()), "");
}

}  // namespace
}  // namespace mlx_ep
