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
std::string Header() { return KernelHeader(Source()); }
std::string Body() { return KernelBody(Source()); }

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

// The fused core's heads-last kernel (ONNXRUNTIME_EP_MLX_HEADS_LAST_KERNEL=1): y [B, H, S, D] as
// [B, S, H, D], the rows keep[b, s] = false zero.
std::string HeadsLastParameters(const std::string& t, const std::string& t_in) {
  return "const " + t_in + "* y, const bool* keep, const __grid_constant__ Shape keep_shape, " + t + "* out";
}

std::string HeadsLastBody() { return GqaHeadsLastSourceForTests(); }

TEST(GqaHeadsLastKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin("");
  int count = 0;
  std::map<std::string, int> threads;
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (const std::string t_in : {std::string(t), std::string("float")}) {
      const std::string name = "h" + std::to_string(count++);
      threads[name] = 256;
      text += "__global__ void " + name + "(" + HeadsLastParameters(t, t_in) + ") {\n  using T = " + t +
              ";\n  constexpr int H = 32;\n  constexpr int D = 64;\n" + HeadsLastBody() + "\n}\n";
    }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_gqa_heads_last_compile", text, threads), "");
}

TEST(GqaHeadsLastKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  // Every value against the layout it comes from, rounded once to T (float32 in: the cast; T in:
  // the value itself), and zeros where keep is false; keep's pattern leaves both kinds in every
  // entry.
  const std::string program = "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" +
                              "#include <cstdio>\n#include <random>\n#include <vector>\n"
                              "template <class T, class TIN, int H, int D>\nvoid heads_last_kernel(" +
                              HeadsLastParameters("T", "TIN") + ") {\n" + HeadsLastBody() + "\n}\n" + R"(
int failures = 0, checks = 0;
template <class T, class TIN, int B, int H, int S, int D>
void Check(const char* name) {
  std::mt19937 rng(B * 131 + S);
  std::uniform_real_distribution<float> value(-2.f, 2.f);
  std::vector<TIN> y(size_t{B} * H * S * D);
  for (TIN& v : y) v = static_cast<TIN>(value(rng) / 3.f);
  bool keep[B * S];
  for (int r = 0; r < B * S; ++r) keep[r] = (r * 7 + 3) % 5 != 0;
  Shape keep_shape;
  keep_shape.v[0] = B;
  keep_shape.v[1] = S;
  std::vector<T> out(y.size(), static_cast<T>(-7.f));
  EmulatedLaunch((int64_t{B} * H * S * D + 255) / 256 * 256, 256,
                 [&] { heads_last_kernel<T, TIN, H, D>(y.data(), keep, keep_shape, out.data()); });
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const float got = static_cast<float>(out[((size_t{b} * S + s) * H + h) * D + d]);
          const float want = keep[b * S + s]
                                 ? static_cast<float>(static_cast<T>(y[((size_t{b} * H + h) * S + s) * D + d]))
                                 : 0.f;
          ++checks;
          if (got != want && failures++ < 20)
            std::printf("MISMATCH %s [%d,%d,%d,%d] = %.8f, want %.8f\n", name, b, s, h, d, got, want);
        }
}
int main() {
  Check<__half, __half, 2, 4, 7, 64>("float16");
  Check<__half, float, 3, 2, 5, 16>("float32 into float16");
  Check<__nv_bfloat16, __nv_bfloat16, 1, 3, 9, 80>("bfloat16");
  Check<float, float, 2, 2, 3, 8>("float32");
  std::printf("checked %d values, %d mismatches\n", checks, failures);
  return failures == 0 && checks > 0 ? 0 : 1;
}
)";
  EXPECT_EQ(BuildAndRun("mlx_ep_gqa_heads_last_emulation", program, "g++", EmulationFlags()), "");
}

TEST(GqaHeadsLastKernel, PlanOfTheLaunch) {
  const int B = 2, H = 8, S = 5, D = 64;
  const mx::array y = mx::zeros({B, H, S, D}, mx::float32), keep = mx::zeros({B, S}, mx::bool_);
  auto plan = PlanHeadsLast(y, keep, mx::float16);
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan), (std::map<std::string, int>{{"H", H}, {"D", D}}));
  EXPECT_EQ(plan->output_shapes, (std::vector<mx::Shape>{{B, S, H, D}}));
  EXPECT_EQ(plan->output_dtypes, (std::vector<mx::Dtype>{mx::float16}));
  EXPECT_EQ(plan->threads, (B * H * S * D + 255) / 256 * 256);
  EXPECT_EQ(plan->per_block, 256);
  // Declined: a keep mask of another shape or type, a 3-D y, an integer y.
  EXPECT_FALSE(PlanHeadsLast(y, mx::zeros({B, 1, S, 1}, mx::bool_), mx::float16));
  EXPECT_FALSE(PlanHeadsLast(y, mx::zeros({B, S}, mx::int32), mx::float16));
  EXPECT_FALSE(PlanHeadsLast(mx::zeros({B, S, D}, mx::float16), keep, mx::float16));
  EXPECT_FALSE(PlanHeadsLast(mx::zeros({B, H, S, D}, mx::int32), keep, mx::float16));
}

}  // namespace
}  // namespace mlx_ep
