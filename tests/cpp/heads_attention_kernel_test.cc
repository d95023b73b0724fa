// The heads-attention kernels (src/ops/attention_heads_cuda.cc: a warp a query row on CUDA cores;
// attention_heads_mma_cuda.cc: a warp 16 rows on tensor cores) compiled by NVRTC as MLX's
// cuda_kernel wraps them, their text run on the host through cuda_host_emulation.h (its
// emulated mma.sync for the tensor-core kernel) against a reference of the composed ops
// (tests/cpp/heads_attention_driver.inc), and the launches they plan. On a GPU:
// test_fused_gpu_paths.py::test_heads_attention_kernel.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mlx/ops.h"

#include "host_program.h"
#include "kernel_constants.h"
#include "ops/attention_heads_cuda.h"

namespace mlx_ep {
namespace {

std::string Header(HeadsKernel kernel) { return KernelHeader(HeadsAttentionSourceForTests(kernel)); }
std::string Body(HeadsKernel kernel) { return KernelBody(HeadsAttentionSourceForTests(kernel)); }

// MLX's parameters as it generates them for the names the body uses: q, kt and v with shape and
// strides (q's rank too), the scaling's value, the mask with shape, strides and rank, then the
// output.
std::string Parameters(const std::string& t) {
  const std::string in = "const " + t + "* ";
  const std::string shape = "const __grid_constant__ Shape ", strides = "const __grid_constant__ Strides ";
  return in + "q, " + shape + "q_shape, " + strides + "q_strides, const __grid_constant__ int q_ndim, " + in +
         "kt, " + shape + "kt_shape, " + strides + "kt_strides, " + in + "v, " + shape + "v_shape, " +
         strides + "v_strides, " + in + "factor, " + in + "mask, " + shape + "mask_shape, " + strides +
         "mask_strides, const __grid_constant__ int mask_ndim, " + t + "* out";
}

std::string Constants(const std::string& t, int d, int scale, bool mask, bool body16) {
  auto flag = [](const char* c, bool v) {
    return std::string("  constexpr bool ") + c + (v ? " = true;\n" : " = false;\n");
  };
  return "  using T = " + t + ";\n  constexpr int D = " + std::to_string(d) +
         ";\n  constexpr int SCALE = " + std::to_string(scale) + ";\n" + flag("MASK", mask) +
         flag("BODY16", body16);
}

// Every variant of `kernel` NVRTC compiles as MLX does (sm_90a), with no thread-local arrays in
// memory (each lane's partial dots, fragments and values stay registers).
void ExpectCompilesLikeMlx(HeadsKernel kernel, const std::vector<std::string>& types) {
  const std::string name = kernel == HeadsKernel::kRows ? "rows" : "mma";
  std::string text =
      MlxKernelsBegin(Header(kernel)) +
      "struct Strides { int64_t v[8]; __device__ int64_t operator[](int i) const { return v[i]; } };\n";
  int count = 0;
  std::map<std::string, int> threads;
  std::vector<std::pair<std::string, std::string>> variants;  // kernel, its T, D and variant
  // D 20: float16's 16-byte path compiled out (D not a multiple of 8), float32's with 5 lanes a
  // row; the tensor cores' zero-padded k steps and a part of an 8-column tile.
  for (const std::string& t : types)
    for (int d : {20, 32, 64, 80, 128})
      for (int variant = 0; variant < 3; ++variant) {
        const bool body16 = variant == 2;
        if (body16 && t != "__half") continue;
        std::string function = "h";
        function += std::to_string(count++);
        threads[function] = 128;
        variants.emplace_back(function,
                              t + " D " + std::to_string(d) + " variant " + std::to_string(variant));
        text += "__global__ void " + function + "(" + Parameters(t) + ") {\n" +
                Constants(t, d, variant, variant != 1, body16) + Body(kernel) + "\n}\n";
      }
  text += kMlxKernelsEnd;
  const std::string program = "mlx_ep_heads_attention_compile_" + name;
  EXPECT_EQ(CompileLikeMlx(program, text, threads), "");
  const std::map<std::string, int> registers = KernelRegisters(program);
  for (const auto& [function, variant] : variants)
    if (registers.count(function))
      std::printf("%s %s: %d registers\n", name.c_str(), variant.c_str(), registers.at(function));
  for (const auto& [function, bytes] : KernelStackBytes(program))
    EXPECT_EQ(bytes, 0) << name << " " << function;
}

TEST(HeadsAttentionKernel, CompilesLikeMlx) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  ExpectCompilesLikeMlx(HeadsKernel::kRows, {"__half", "__nv_bfloat16", "float"});
  ExpectCompilesLikeMlx(HeadsKernel::kTensorCores, {"__half", "__nv_bfloat16"});
}

// `kernel`'s text on the host against the driver's cases (the tensor-core kernel: float16 and
// bfloat16 ones, 16 query rows a warp).
void ExpectValuesOnTheHostEmulation(HeadsKernel kernel) {
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  const bool mma = kernel == HeadsKernel::kTensorCores;
  const std::string program = "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" +
                              Header(kernel) +
                              "template <class T, int D, int SCALE, bool MASK, bool BODY16>\n" +
                              "void heads_kernel(" + Parameters("T") + ") {\n" + Body(kernel) + "\n}\n" +
                              "constexpr bool kTensorCores = " + (mma ? "true" : "false") + ";\n#include \"" +
                              (tests / "heads_attention_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun(std::string("mlx_ep_heads_attention_emulation_") + (mma ? "mma" : "rows"), program,
                        "g++", EmulationFlags()),
            "");
}

TEST(HeadsAttentionKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  ExpectValuesOnTheHostEmulation(HeadsKernel::kRows);
}

TEST(HeadsAttentionKernel, TensorCoreValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  ExpectValuesOnTheHostEmulation(HeadsKernel::kTensorCores);
}

TEST(HeadsAttentionKernel, PlanOfTheLaunch) {
  // BERT-base's heads: [8, 12, 128, 64] float16 views, scores / 8 + a [8, 1, 1, 128] mask.
  const mx::array q = mx::zeros({8, 12, 128, 64}, mx::float16), kt = mx::zeros({8, 12, 64, 128}, mx::float16);
  const mx::array v = mx::zeros({8, 12, 128, 64}, mx::float16), factor = mx::array(8.f, mx::float16);
  const mx::array mask = mx::zeros({8, 1, 1, 128}, mx::float16);
  ScoreTerms terms;
  terms.scale = ScoreTerms::Scale::kDivide;
  terms.mask = true;
  auto rows = [](const HeadsAttentionInputs& in) { return PlanHeadsAttention(in, HeadsKernel::kRows); };
  auto mma = [](const HeadsAttentionInputs& in) { return PlanHeadsAttention(in, HeadsKernel::kTensorCores); };
  auto plan = rows({q, kt, v, factor, mask, terms, true});
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan), (std::map<std::string, int>{{"D", 64}, {"SCALE", 1}, {"MASK", 1}, {"BODY16", 1}}));
  EXPECT_EQ(plan->threads, 8 * 12 * 128 * 32);  // a warp a query row
  EXPECT_EQ(plan->per_block, 128);
  EXPECT_EQ(plan->output_shapes, (std::vector<mx::Shape>{{8, 12, 128, 64}}));
  ASSERT_EQ(plan->inputs.size(), 5u);
  EXPECT_EQ(plan->inputs[4].id(), mask.id());
  // On tensor cores: the same inputs and constants, a block of 4 warps 64 query rows.
  plan = mma({q, kt, v, factor, mask, terms, true});
  ASSERT_TRUE(plan);
  EXPECT_EQ(Ints(*plan), (std::map<std::string, int>{{"D", 64}, {"SCALE", 1}, {"MASK", 1}, {"BODY16", 1}}));
  EXPECT_EQ(plan->threads, 8 * 12 * (128 / 64) * 128);
  EXPECT_EQ(plan->per_block, 128);
  EXPECT_EQ(plan->inputs[4].id(), mask.id());
  // 17 rows: a block a matrix; keys past kHeadsAttentionMaxKeys (the scores are recomputed, not
  // held); float32 is the CUDA cores' alone (tensor cores would round it to TF32).
  const mx::array q17 = mx::zeros({2, 17, 64}, mx::float16);
  const mx::array kt2000 = mx::zeros({2, 64, 2000}, mx::float16),
                  v2000 = mx::zeros({2, 2000, 64}, mx::float16);
  plan = mma({q17, kt2000, v2000, q17, q17, {}, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->threads, 2 * 128);
  EXPECT_FALSE(rows({q17, kt2000, v2000, q17, q17, {}, false}));
  const mx::array q32 = mx::zeros({2, 3, 64}, mx::float32), kt32 = mx::zeros({2, 64, 3}, mx::float32);
  EXPECT_FALSE(mma({q32, kt32, q32, q32, q32, {}, false}));
  // A rank-0 mask is read as [1]; no terms: placeholders are not looked at.
  plan = rows({q, kt, v, q, mx::array(0.f, mx::float16), {.mask = true}, false});
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->inputs[4].shape(), (mx::Shape{1}));
  EXPECT_TRUE(rows({q, kt, v, q, q, {}, false}));
  // Declined: keys past kHeadsAttentionMaxKeys, D over 128, other leading dims, mixed types, a
  // float16 body of float32, a scaling of several values.
  EXPECT_FALSE(rows({mx::zeros({1, 1, 1}, mx::float32),
                     mx::zeros({1, 1, kHeadsAttentionMaxKeys + 1}, mx::float32),
                     mx::zeros({1, kHeadsAttentionMaxKeys + 1, 1}, mx::float32),
                     q,
                     q,
                     {},
                     false}));
  EXPECT_FALSE(rows({mx::zeros({2, 4, 129}, mx::float32),
                     mx::zeros({2, 129, 4}, mx::float32),
                     mx::zeros({2, 4, 129}, mx::float32),
                     q,
                     q,
                     {},
                     false}));
  EXPECT_FALSE(rows({q, mx::zeros({8, 6, 64, 128}, mx::float16), v, q, q, {}, false}));
  EXPECT_FALSE(rows({q, kt, mx::zeros({8, 12, 128, 64}, mx::float32), q, q, {}, false}));
  EXPECT_FALSE(rows({q32, kt32, q32, q32, q32, {}, true}));
  EXPECT_FALSE(rows({q, kt, v, mx::zeros({2}, mx::float16), q, terms, true}));
  EXPECT_TRUE(rows({q32, kt32, q32, q32, q32, {}, false}));
}

TEST(HeadsAttentionKernel, FindsQAndKBehindTheSoftmaxScores) {
  // BERT's layout as the EP traces it: a merged QKV product [B, S, 3E] split in three, heads of
  // [B, S, H, D] transposed (K's to [B, H, D, S]); the scores are MLX's Matmul of the two views.
  const int B = 2, S = 5, H = 3, D = 8;
  const mx::array qkv = mx::zeros({B, S, 3 * H * D}, mx::float16);
  const std::vector<mx::array> parts = mx::split(qkv, 3, -1);
  auto heads = [&](const mx::array& a, std::vector<int> perm) {
    return mx::transpose(mx::reshape(a, {B, S, H, D}), perm);
  };
  const mx::array q = heads(parts[0], {0, 2, 1, 3}), kt = heads(parts[1], {0, 2, 3, 1});
  const mx::array v = heads(parts[2], {0, 2, 1, 3});
  const mx::array scores = mx::matmul(q, kt), factor = mx::array(2.f, mx::float16);
  const mx::array mask = mx::zeros({B, 1, 1, S}, mx::float16), p = mx::zeros({B, H, S, S}, mx::float16);
  ScoreTerms terms;
  terms.scale = ScoreTerms::Scale::kDivide;
  terms.mask = true;
  const RowSoftmaxLaunch softmax{{scores, factor, mask}, terms, false, true};
  const std::optional<HeadsAttentionInputs> in = HeadsAttentionInputsOf(softmax, p, v);
  ASSERT_TRUE(in);
  EXPECT_EQ(in->q.id(), q.id());
  EXPECT_EQ(in->kt.id(), kt.id());
  EXPECT_EQ(in->v.id(), v.id());
  EXPECT_EQ(in->factor.id(), factor.id());
  EXPECT_EQ(in->mask.id(), mask.id());
  EXPECT_EQ(in->terms, terms);
  EXPECT_TRUE(in->float16_body);
  EXPECT_TRUE(PlanHeadsAttention(*in, HeadsKernel::kRows));
  // Not: a LogSoftmax, scores that are not a product, a P of another shape.
  EXPECT_FALSE(HeadsAttentionInputsOf({{scores, factor, mask}, terms, true, false}, p, v));
  EXPECT_FALSE(
      HeadsAttentionInputsOf({{mx::multiply(scores, factor), factor, mask}, terms, false, true}, p, v));
  EXPECT_FALSE(HeadsAttentionInputsOf(softmax, mx::zeros({B, H, S, S + 1}, mx::float16), v));
  // No scale, no mask: the softmax launch's placeholders are its scores, which the kernel must not
  // take as inputs (they would be evaluated: the product it replaces).
  const RowSoftmaxLaunch plain{{scores, scores, scores}, ScoreTerms{}, false, false};
  const std::optional<HeadsAttentionInputs> bare = HeadsAttentionInputsOf(plain, p, v);
  ASSERT_TRUE(bare);
  const std::optional<KernelLaunch> launch = PlanHeadsAttention(*bare, HeadsKernel::kRows);
  ASSERT_TRUE(launch);
  for (const mx::array& input : launch->inputs) EXPECT_NE(input.id(), scores.id());
}

}  // namespace
}  // namespace mlx_ep
