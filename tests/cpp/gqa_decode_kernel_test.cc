// GroupQueryAttention's decode-step kernel (src/ops/attention_gqa_cuda.cc) compiled by nvcc as
// MLX's cuda_kernel wraps it, and its text run on the host through tests/cpp/cuda_host_emulation.h
// against a double-precision reference of the node (tests/cpp/gqa_decode_driver.inc). Its GPU
// parity and census: test_fused_gpu_paths.py::test_decode_step_by_kernel.
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

// The parameters MLX's cuda_kernel generates for the body: the inputs (an absent cache or
// position_ids is another input in its place: `placeholder` is its type), then the outputs.
std::string Parameters(const std::string& t, const std::string& cache, const std::string& ids) {
  return "const " + t + "* q_in, const " + t + "* k_in, const " + t + "* v_in, const " + t +
         "* past_k, const " + t + "* past_v, const int32_t* seqlens, const int32_t* total_len, const " +
         cache + "* cos_cache, const " + cache + "* sin_cache, const " + ids + "* pos_ids, " + t + "* out, " +
         t + "* k_row, " + t + "* v_row";
}

// The template constants MLX declares before the body, for one kernel of the compile test.
std::string Constants(const std::string& t, int d, int rot, bool interleaved, int window, int pos_stride) {
  std::string text = "  using T = " + t + ";\n";
  auto constant = [&](const char* name, int value) {
    text += "  constexpr int " + std::string(name) + " = " + std::to_string(value) + ";\n";
  };
  constant("D", d);
  constant("LCAP", 1024);
  constant("ROT", rot);
  text += std::string("  constexpr bool INTERLEAVED = ") + (interleaved ? "true" : "false") + ";\n";
  constant("H", 32);
  constant("HKV", 4);
  constant("P", 1000);
  constant("MAXPOS", 2048);
  constant("WINDOW", window);
  constant("POS_STRIDE", pos_stride);
  constant("QS", 40 * d);
  constant("QO", 0);
  constant("KS", 40 * d);
  constant("KO", 32 * d);
  constant("VS", 40 * d);
  constant("VO", 36 * d);
  constant("SCALE_BITS", 1040187392);
  return text;
}

TEST(GqaDecodeKernel, Compiles) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int d : {64, 80, 128}) {
      // No rotation (caches and position_ids absent: int32 placeholders), full-width, and a
      // partial interleaved rotation with position_ids and a window.
      const struct {
        int rot;
        bool interleaved;
        int window, pos_stride;
      } cases[] = {{0, false, 0, 0}, {d, false, 0, 0}, {d / 2, true, 16, 1}};
      for (const auto& k : cases) {
        const std::string cache = k.rot ? t : "int32_t", ids = k.pos_stride ? "int64_t" : "int32_t";
        text += "__global__ void k" + std::to_string(count++) + "(" + Parameters(t, cache, ids) + ") {\n" +
                Constants(t, d, k.rot, k.interleaved, k.window, k.pos_stride) + Body() + "\n}\n";
      }
    }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_gqa_decode_compile", text), "");
}

TEST(GqaDecodeKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  // The body as a template over what MLX declares as constants (the driver's cases supply them).
  const std::string program =
      "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() +
      "template <class T, int D, int LCAP, int ROT, bool INTERLEAVED, int H, int HKV, int P, int MAXPOS, int "
      "WINDOW,\n"
      "          int POS_STRIDE, int QS, int QO, int KS, int KO, int VS, int VO, int SCALE_BITS>\n"
      "void step_kernel(" +
      Parameters("T", "T", "int64_t") + ") {\n" + Body() + "\n}\n#include \"" +
      (tests / "gqa_decode_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_gqa_decode_emulation", program, "g++", EmulationFlags()), "");
}

}  // namespace
}  // namespace mlx_ep
