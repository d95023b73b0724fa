// GroupQueryAttention's decode-step kernel (src/ops/attention_gqa_cuda.cc) compiled by nvcc as
// MLX's cuda_kernel wraps it, and its text run on the host through tests/cpp/cuda_host_emulation.h
// against a double-precision reference of the node (tests/cpp/gqa_decode_driver.inc). Its GPU
// parity and census: test_fused_gpu_paths.py::test_decode_step_by_kernel.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <variant>

#include "mlx/ops.h"

#include "host_program.h"
#include "kernel_constants.h"
#include "ops/attention_gqa_step.h"

namespace mlx_ep {
namespace {

std::string Source(bool split = false) { return GqaDecodeKernelSourceForTests(split); }
std::string Header() { return KernelHeader(Source()); }
std::string Body(bool split = false) { return KernelBody(Source(split)); }

// The parameters MLX's cuda_kernel generates for the body: the inputs (an absent cache or
// position_ids is another input in its place: `placeholder` is its type), then the outputs.
// The split kernel's (split): the heads' counters after the inputs, the splits' parts after the
// outputs.
std::string Parameters(const std::string& t, const std::string& cache, const std::string& ids,
                       bool split = false) {
  return "const " + t + "* q_in, const " + t + "* k_in, const " + t + "* v_in, const " + t +
         "* past_k, const " + t + "* past_v, const int32_t* seqlens, const int32_t* total_len, const " +
         cache + "* cos_cache, const " + cache + "* sin_cache, const " + ids + "* pos_ids, " +
         (split ? "const int32_t* counters, " : "") + t + "* out, " + t + "* k_row, " + t + "* v_row" +
         (split ? ", float* parts" : "");
}

// The template constants MLX declares before the body, for one kernel of the compile test.
std::string Constants(const std::string& t, int d, int rot, bool interleaved, int window, int pos_stride,
                      int nt, int splits = 1) {
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
  constant("NT", nt);
  if (splits > 1) constant("SPLITS", splits);
  return text;
}

TEST(GqaDecodeKernel, Compiles) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(Header());
  int count = 0;
  std::map<std::string, int> threads;  // a kernel's block
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int d : {64, 80, 128}) {
      // No rotation (caches and position_ids absent: int32 placeholders), full-width, and a
      // partial interleaved rotation with position_ids and a window.
      const struct {
        int rot;
        bool interleaved;
        int window, pos_stride;
      } cases[] = {{0, false, 0, 0}, {d, false, 0, 0}, {d / 2, true, 16, 1}};
      for (const auto& k : cases)
        // The default block (512), ONNXRUNTIME_EP_MLX_DECODE_THREADS=128, and in blocks of past rows
        // (ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS: 8 splits, blocks of 128 and 256).
        for (const auto& [nt, splits] : {std::pair{128, 1}, {512, 1}, {128, 8}, {256, 8}}) {
          const std::string cache = k.rot ? t : "int32_t", ids = k.pos_stride ? "int64_t" : "int32_t";
          std::string name = "k";
          name += std::to_string(count++);
          threads[name] = nt;
          text += "__global__ void " + name + "(" + Parameters(t, cache, ids, splits > 1) + ") {\n" +
                  Constants(t, d, k.rot, k.interleaved, k.window, k.pos_stride, nt, splits) +
                  Body(splits > 1) + "\n}\n";
        }
    }
  text += kMlxKernelsEnd;
  // Every block launches: its threads' registers fit a block's (sm_90a's sass; up to 94 a thread,
  // so 512 threads fit and 1024 would not).
  EXPECT_EQ(CompileLikeMlx("mlx_ep_gqa_decode_compile", text, threads), "");
}

// The grouped kernel (ONNXRUNTIME_EP_MLX_DECODE_GROUPED=1, attention_gqa_grouped_cuda.cc): its
// parameters are the split kernel's (counters after the inputs, parts after the outputs).
std::string GroupedSource() { return GqaGroupedKernelSourceForTests(); }
std::string GroupedHeader() { return KernelHeader(GroupedSource()); }
std::string GroupedBody() { return KernelBody(GroupedSource()); }

TEST(GqaDecodeKernel, GroupedCompiles) {
  if (!NvrtcAvailable()) GTEST_SKIP() << "no NVRTC (the CUDA toolkit)";
  std::string text = MlxKernelsBegin(GroupedHeader());
  int count = 0;
  std::map<std::string, int> threads;
  for (const char* t : {"__half", "__nv_bfloat16", "float"})
    for (int d : {64, 80, 128}) {
      // PlanGroupedDecodeStep's rows a block for P = 1,000 (Constants'): 4,096 / D.
      const int rows = 4096 / d, splits = (1000 + rows - 1) / rows;
      const struct {
        int rot;
        bool interleaved;
        int window, pos_stride;
      } cases[] = {{0, false, 0, 0}, {d, false, 0, 0}, {d / 2, true, 16, 1}};
      for (const auto& k : cases) {
        if (d != 64 && k.rot == d) continue;  // the full rotation for one head size only
        const std::string cache = k.rot ? t : "int32_t", ids = k.pos_stride ? "int64_t" : "int32_t";
        const std::string name = "g" + std::to_string(count++);
        threads[name] = 256;
        text += "__global__ void " + name + "(" + Parameters(t, cache, ids, true) + ") {\n" +
                Constants(t, d, k.rot, k.interleaved, k.window, k.pos_stride, 256, splits) +
                "  constexpr int ROWS = " + std::to_string(rows) + ";\n" + GroupedBody() + "\n}\n";
      }
    }
  text += kMlxKernelsEnd;
  EXPECT_EQ(CompileLikeMlx("mlx_ep_gqa_grouped_compile", text, threads), "");
}

TEST(GqaDecodeKernel, ValuesOnTheHostEmulation) {
  if (CudaIncludeDir().empty()) GTEST_SKIP() << "no CUDA headers (cuda_fp16.h)";
  const std::filesystem::path tests = MLX_EP_TEST_SOURCE_DIR;
  // The body as a template over what MLX declares as constants (the driver's cases supply them).
  const std::string program =
      "#include \"" + (tests / "cuda_host_emulation.h").string() + "\"\n" + Header() +
      "template <class T, int D, int LCAP, int ROT, bool INTERLEAVED, int H, int HKV, int P, int MAXPOS, int "
      "WINDOW,\n"
      "          int POS_STRIDE, int QS, int QO, int KS, int KO, int VS, int VO, int SCALE_BITS, int NT>\n"
      "void step_kernel(" +
      Parameters("T", "T", "int64_t") + ") {\n" + Body() + "\n}\n" +
      "template <class T, int D, int LCAP, int ROT, bool INTERLEAVED, int H, int HKV, int P, int MAXPOS, int "
      "WINDOW,\n"
      "          int POS_STRIDE, int QS, int QO, int KS, int KO, int VS, int VO, int SCALE_BITS, int NT, int "
      "SPLITS>\n"
      "void split_kernel(" +
      Parameters("T", "T", "int64_t", true) + ") {\n" + Body(true) + "\n}\n" +
      // The grouped kernel's body, after the per-head kernel's (its header extends that one).
      GroupedHeader().substr(Header().size()) +
      "template <class T, int D, int ROT, bool INTERLEAVED, int H, int HKV, int P, int MAXPOS, int WINDOW,\n"
      "          int POS_STRIDE, int QS, int QO, int KS, int KO, int VS, int VO, int SCALE_BITS, int NT, int "
      "ROWS,\n"
      "          int SPLITS>\n"
      "void group_kernel(" +
      Parameters("T", "T", "int64_t", true) + ") {\n" + GroupedBody() + "\n}\n#include \"" +
      (tests / "gqa_decode_driver.inc").string() + "\"\n";
  EXPECT_EQ(BuildAndRun("mlx_ep_gqa_decode_emulation", program, "g++", EmulationFlags()), "");
}

// The launch DecodeStepByKernel makes, on the host: where each row starts in packed and separate
// QKV (the driver's QS/QO/KS/KO/VS/VO), the rotation's constants, which inputs stand in for
// absent ones, and the shapes it leaves to the composed paths.
TEST(GqaDecodeKernel, PlanOfTheLaunch) {
  const int B = 2, H = 8, Hkv = 2, D = 64, P = 300;
  const mx::array packed = mx::zeros({B, 1, (H + 2 * Hkv) * D}, mx::float16);
  const mx::array past = mx::zeros({B, Hkv, P, D}, mx::float16), seqlens = mx::zeros({B}, mx::int32);
  const mx::array total = mx::array(5, mx::int32), cache = mx::zeros({512, 16}, mx::float16);
  const mx::array ids = mx::zeros({B, 1}, mx::int64);
  auto plan = PlanDecodeStep({packed, std::nullopt, std::nullopt, past, past, seqlens, total, cache, cache,
                              ids, H, Hkv, D, true, 4, 0.125f});
  ASSERT_TRUE(plan);
  const std::map<std::string, int> want = {
      {"D", D},     {"LCAP", 512},     {"ROT", 32},       {"H", H},
      {"HKV", Hkv}, {"P", P},          {"MAXPOS", 512},   {"WINDOW", 4},
      {"QS", 768},  {"QO", 0},         {"KS", 768},       {"KO", 512},
      {"VS", 768},  {"VO", 640},       {"POS_STRIDE", 1}, {"SCALE_BITS", 1040187392},
      {"NT", 512},  {"INTERLEAVED", 1}};
  EXPECT_EQ(Ints(*plan), want);
  EXPECT_EQ(plan->threads, B * H * 512);  // ONNXRUNTIME_EP_MLX_DECODE_THREADS unset: the default
  EXPECT_EQ(plan->per_block, 512);
  ASSERT_EQ(plan->output_shapes.size(), 3u);
  EXPECT_EQ(plan->output_shapes[0], (mx::Shape{B, 1, H * D}));
  EXPECT_EQ(plan->output_shapes[1], (mx::Shape{B, Hkv, 1, D}));
  EXPECT_EQ(plan->inputs[1].id(), packed.id());  // key and value: the packed input again
  EXPECT_EQ(plan->inputs[9].id(), ids.id());

  // In blocks of 100 past rows (ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=100): 3 splits of 100 rows,
  // whose one pass of loads a block of 128 covers (16 rows of 8 lanes, 8 passes in flight), the
  // heads' counters (zeros) as an 11th input and the splits' parts as a 4th output.
  auto split = PlanDecodeStep({packed, std::nullopt, std::nullopt, past, past, seqlens, total, cache, cache,
                               ids, H, Hkv, D, true, 4, 0.125f},
                              100);
  ASSERT_TRUE(split);
  EXPECT_EQ(Ints(*split).at("SPLITS"), 3);
  EXPECT_EQ(Ints(*split).at("LCAP"), 256);
  EXPECT_EQ(split->per_block, 128);
  EXPECT_EQ(split->threads, B * H * 3 * 128);
  ASSERT_EQ(split->inputs.size(), 11u);
  const mx::array counters = split->inputs[10];
  EXPECT_EQ(counters.shape(), (mx::Shape{B * H}));
  EXPECT_EQ(counters.dtype(), mx::int32);
  EXPECT_EQ(mx::sum(mx::abs(counters)).item<int>(), 0);
  ASSERT_EQ(split->output_shapes.size(), 4u);
  EXPECT_EQ(split->output_shapes[3], (mx::Shape{B * H * 3 * (D + 2)}));
  EXPECT_EQ(split->output_dtypes,
            (std::vector<mx::Dtype>{mx::float16, mx::float16, mx::float16, mx::float32}));
  // Fewer rows than a split: one block a head, as without the variable.
  EXPECT_EQ(PlanDecodeStep({packed, std::nullopt, std::nullopt, past, past, seqlens, total, cache, cache, ids,
                            H, Hkv, D, true, 4, 0.125f},
                           P)
                ->inputs.size(),
            10u);

  // Apart, no rotation: the caches' and position_ids' places hold seqlens_k (never read).
  const mx::array q = mx::zeros({B, 1, H * D}, mx::bfloat16), kv = mx::zeros({B, 1, Hkv * D}, mx::bfloat16);
  const mx::array past_bf = mx::zeros({B, Hkv, P, D}, mx::bfloat16);
  plan = PlanDecodeStep({q, kv, kv, past_bf, past_bf, seqlens, total, std::nullopt, std::nullopt,
                         std::nullopt, H, Hkv, D, false, 0, 0.125f});
  ASSERT_TRUE(plan);
  const std::map<std::string, int> ints = Ints(*plan);
  EXPECT_EQ(ints.at("QS"), H * D);
  EXPECT_EQ(ints.at("KS"), Hkv * D);
  EXPECT_EQ(ints.at("KO"), 0);
  EXPECT_EQ(ints.at("ROT"), 0);
  EXPECT_EQ(ints.at("POS_STRIDE"), 0);
  EXPECT_EQ(plan->inputs[7].id(), seqlens.id());

  // The grouped kernel (ONNXRUNTIME_EP_MLX_DECODE_GROUPED=1): a block per (entry, KV head, split
  // of 64 rows), 5 splits of P = 300, blocks of 256, the KV heads' counters and the parts of each
  // split's 4 query heads; no LCAP.
  auto grouped = PlanDecodeStep({packed, std::nullopt, std::nullopt, past, past, seqlens, total, cache, cache,
                                 ids, H, Hkv, D, true, 4, 0.125f},
                                0, true);
  ASSERT_TRUE(grouped);
  std::map<std::string, int> grouped_want = want;
  grouped_want.erase("LCAP");
  grouped_want["NT"] = 256;
  grouped_want["ROWS"] = 64;
  grouped_want["SPLITS"] = 5;
  EXPECT_EQ(Ints(*grouped), grouped_want);
  EXPECT_EQ(grouped->threads, B * Hkv * 5 * 256);
  EXPECT_EQ(grouped->per_block, 256);
  ASSERT_EQ(grouped->inputs.size(), 11u);
  EXPECT_EQ(grouped->inputs[10].shape(), (mx::Shape{B * Hkv}));
  EXPECT_EQ(mx::sum(mx::abs(grouped->inputs[10])).item<int>(), 0);
  ASSERT_EQ(grouped->output_shapes.size(), 4u);
  EXPECT_EQ(grouped->output_shapes[3], (mx::Shape{B * Hkv * 5 * (H / Hkv) * (D + 2)}));
  EXPECT_EQ(grouped->output_dtypes.back(), mx::float32);
  // A head of 128 takes blocks of 32 rows; 32 query heads of one KV head over 8,191 rows would keep
  // more weights in the merge than the K rows' room holds: left to the per-head kernel.
  const mx::array wide128 = mx::zeros({B, 1, (H + 2 * Hkv) * 128}, mx::float16);
  const mx::array past128 = mx::zeros({B, Hkv, P, 128}, mx::float16);
  EXPECT_EQ(Ints(*PlanDecodeStep({wide128, std::nullopt, std::nullopt, past128, past128, seqlens, total,
                                  std::nullopt, std::nullopt, std::nullopt, H, Hkv, 128, false, 0, 0.125f},
                                 0, true))
                .at("ROWS"),
            32);
  const mx::array mqa = mx::zeros({B, 1, (32 + 2) * D}, mx::float16);
  const mx::array past_mqa = mx::zeros({B, 1, 8191, D}, mx::float16);
  EXPECT_FALSE(PlanDecodeStep({mqa, std::nullopt, std::nullopt, past_mqa, past_mqa, seqlens, total,
                               std::nullopt, std::nullopt, std::nullopt, 32, 1, D, false, 0, 0.125f},
                              0, true));

  // Left to the composed paths: a head over 128, 8,192 past rows, a cache dtype the past lacks, a
  // negative scale (a minus sign in the kernel's name), query rows of another width.
  const mx::array wide = mx::zeros({B, 1, (H + 2 * Hkv) * 160}, mx::float16);
  const mx::array wide_past = mx::zeros({B, Hkv, P, 160}, mx::float16);
  EXPECT_FALSE(PlanDecodeStep({wide, std::nullopt, std::nullopt, wide_past, wide_past, seqlens, total,
                               std::nullopt, std::nullopt, std::nullopt, H, Hkv, 160, false, 0, 0.1f}));
  const mx::array long_past = mx::zeros({B, Hkv, 8192, D}, mx::float16);
  EXPECT_FALSE(PlanDecodeStep({packed, std::nullopt, std::nullopt, long_past, long_past, seqlens, total,
                               std::nullopt, std::nullopt, std::nullopt, H, Hkv, D, false, 0, 0.125f}));
  EXPECT_FALSE(PlanDecodeStep({packed, std::nullopt, std::nullopt, past_bf, past_bf, seqlens, total,
                               std::nullopt, std::nullopt, std::nullopt, H, Hkv, D, false, 0, 0.125f}));
  EXPECT_FALSE(PlanDecodeStep({packed, std::nullopt, std::nullopt, past, past, seqlens, total, std::nullopt,
                               std::nullopt, std::nullopt, H, Hkv, D, false, 0, -0.125f}));
  EXPECT_FALSE(PlanDecodeStep({q, std::nullopt, std::nullopt, past_bf, past_bf, seqlens, total, std::nullopt,
                               std::nullopt, std::nullopt, H, Hkv, D, false, 0, 0.125f}));
}

}  // namespace
}  // namespace mlx_ep
