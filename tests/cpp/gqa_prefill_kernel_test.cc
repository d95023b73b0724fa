// GroupQueryAttention's prompt rotation kernel (src/ops/attention_gqa_prefill_cuda.cc) compiled by
// NVRTC as MLX's cuda_kernel wraps it, its text run on the host through cuda_host_emulation.h
// against a reference of the composed rotation (ApplyRotary's float32 products rounded to T, bit
// for bit), and the launch it plans. On a GPU: test_fused_gpu_paths.py::test_prefill_rotate_kernel.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <variant>

#include "mlx/ops.h"

#include "host_program.h"
#include "kernel_constants.h"
#include "ops/attention_gqa_prefill.h"

namespace mlx_ep {
namespace {

std::string Source() { return GqaPrefillRotateSourceForTests(); }
std::string Header() { return Source().substr(0, Source().find("// kernel body:")); }
std::string Body() { return Source().substr(Source().find("// kernel body:")); }

// MLX's parameters: the inputs (positions with the shape the body names), then the outputs.
std::string Parameters(const std::string& t) {
  return "const " + t + "* q_in, const " + t + "* k_in, const " + t + "* v_in, const int32_t* pos, " +
         "const __grid_constant__ Shape pos_shape, const " + t + "* cos_cache, const " + t + "* sin_cache, " +
         t + "* q_out, " + t + "* k_out, " + t + "* v_out";
}

TEST(GqaPrefillRotateKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  std::map<std::string, int> threads;
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int d : {64, 80, 128})
      for (const auto& [rot, interleaved] : {std::pair{d, false}, {d / 2, true}}) {
        std::string name = "k";
        name += std::to_string(count++);
        threads[name] = 256;
        auto constant = [](const char* c, int v) {
          return "  constexpr int " + std::string(c) + " = " + std::to_string(v) + ";\n";
        };
        text += "__global__ void " + name + "(" + Parameters(t) + ") {\n  using T = " + t + ";\n" +
                constant("D", d) + constant("ROT", rot) +
                "  constexpr bool INTERLEAVED = " + (interleaved ? "true" : "false") + ";\n" +
                constant("H", 32) + constant("HKV", 4) + constant("QS", 40 * d) + constant("QO", 0) +
                constant("KS", 40 * d) + constant("KO", 32 * d) + constant("VS", 40 * d) +
                constant("VO", 36 * d) + Body() + "\n}\n";
      }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_gqa_prefill_compile", text, threads), "");
}

TEST(GqaPrefillRotateKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  const std::string program = "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() +
                              "template <class T, int D, int ROT, bool INTERLEAVED, int H, int HKV, int QS, "
                              "int QO, int KS, int KO, int VS, "
                              "int VO>\nvoid rotate_kernel(" +
                              Parameters("T") + ") {\n" + Body() + "\n}\n#include \"" +
                              (tests / "gqa_prefill_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_gqa_prefill_emulation", program, "g++", EmulationFlags()), "");
}

TEST(GqaPrefillRotateKernel, PlanOfTheLaunch) {
  const int B = 2, S = 5, H = 8, Hkv = 2, D = 64;
  const mx::array packed = mx::zeros({B, S, (H + 2 * Hkv) * D}, mx::float16);
  const mx::array pos = mx::zeros({B, S}, mx::int32), cache = mx::zeros({512, 16}, mx::float16);
  auto plan = PlanPrefillRotate({packed, std::nullopt, std::nullopt, pos, cache, cache, H, Hkv, D, true});
  ASSERT_TRUE(plan);
  const std::map<std::string, int> want = {{"D", D},    {"ROT", 32}, {"H", H},          {"HKV", Hkv},
                                           {"QS", 768}, {"QO", 0},   {"KS", 768},       {"KO", 512},
                                           {"VS", 768}, {"VO", 640}, {"INTERLEAVED", 1}};
  EXPECT_EQ(Ints(*plan), want);
  EXPECT_EQ(plan->per_block, 256);
  EXPECT_EQ(plan->threads, (B * S * (H + 2 * Hkv) * D + 255) / 256 * 256);
  ASSERT_EQ(plan->output_shapes.size(), 3u);
  EXPECT_EQ(plan->output_shapes[0], (mx::Shape{B, H, S, D}));
  EXPECT_EQ(plan->output_shapes[2], (mx::Shape{B, Hkv, S, D}));
  EXPECT_EQ(plan->inputs[1].id(), packed.id());  // key and value: the packed input again

  // Apart: each input its own rows.
  const mx::array q = mx::zeros({B, S, H * D}, mx::bfloat16), kv = mx::zeros({B, S, Hkv * D}, mx::bfloat16);
  const mx::array cache_bf = mx::zeros({512, 32}, mx::bfloat16);
  plan = PlanPrefillRotate({q, kv, kv, pos, cache_bf, cache_bf, H, Hkv, D, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan).at("QS"), H * D);
  EXPECT_EQ(Ints(*plan).at("KS"), Hkv * D);
  EXPECT_EQ(Ints(*plan).at("ROT"), D);

  // Declined: caches of another dtype, a rotation wider than the head, positions of another shape
  // or type, rows of another width.
  EXPECT_FALSE(PlanPrefillRotate({q, kv, kv, pos, cache, cache, H, Hkv, D, false}));
  const mx::array wide = mx::zeros({512, 40}, mx::bfloat16);
  EXPECT_FALSE(PlanPrefillRotate({q, kv, kv, pos, wide, wide, H, Hkv, D, false}));
  EXPECT_FALSE(
      PlanPrefillRotate({q, kv, kv, mx::zeros({B * S}, mx::int32), cache_bf, cache_bf, H, Hkv, D, false}));
  EXPECT_FALSE(
      PlanPrefillRotate({q, kv, kv, mx::zeros({B, S}, mx::int64), cache_bf, cache_bf, H, Hkv, D, false}));
  EXPECT_FALSE(PlanPrefillRotate({q, std::nullopt, std::nullopt, pos, cache_bf, cache_bf, H, Hkv, D, false}));
}

}  // namespace
}  // namespace mlx_ep
