// A GroupQueryAttention decode step as one MLX custom CUDA kernel
// (ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel; fused_gpu_internal.h, attention_contrib_gqa.cc).
//
// Why: MLX's host work per primitive is what a decode step's time is on the H200 (~5.5 µs of
// eval each, ~1,000 a TinyLlama step for ~0.5 ms of GPU work). One GroupQueryAttention layer was
// ~30 of them: the packed QKV's split (Reshape, Transpose, Slices), the rotation of Q and K (two
// fused kernels over Slice/ExpandDims views), Concatenates of the past buffer and the new K and
// V rows, the doubled query row and the mask cuDNN's masked attention needs (~54 µs of host time
// a call), the zeroing select and the output's transposes, and a copy of the strided V row for the
// in-place write. This kernel does all of it from the node's own inputs: the query (packed QKV or
// apart), the past buffers read where they are (stale rows never read), seqlens_k,
// total_sequence_length, the cos/sin caches (position_ids), and writes the output in its
// [B, 1, H * D] layout plus the rotated K row and the V row for the in-place update.
//
// Numerics as ORT's CPU kernel and the composed translation: the rotation in float32 rounded to T
// (ORT stores the rotated Q and K in T), float32 scores q.k * scale, a float32 softmax over the
// attended keys, P V in float32 with P unrounded (cuDNN rounds P to T), the output rounded once.
// The masks are attention_contrib_gqa.cc's for one query row: first prompt when
// total_sequence_length is 1, the new row at offset_b = seqlens_k[b] (0 on the first prompt),
// past rows j < offset_b, window [offset_b + 1 - window, ...), a row attending nothing is zero.
//
// Layout: one block of NT threads (128; DecodeThreads) per (batch entry, query head). The rotated
// query and key rows in shared memory; the scores of the P + 1 keys in shared memory (up to
// kMaxKeys), block reductions for the max and the sum. The past rows, for the scores and for P V,
// are read by groups of lanes, 16 bytes a lane (Lanes: 8 lanes a float16 row of 64), eight rows a
// group in flight before their arithmetic; the groups' P V sums are added at the end with the new
// row's.
// With ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=N (opt-in) a query head's past rows are split among
// blocks of N rows (flash-decoding): B x H blocks, 32 at batch 1 on an H100's 132 SMs, read a
// layer's cache at ~24-50 GB/s a block (20 us of a layer at 512 threads); each split's block
// writes its max, sum and P V sums, and the last to finish (a count per head, in a buffer the
// node's launches share and that block sets back to zero) merges them.
// The sixteenth session's H200 run measured the first layout (each thread one key's 64 values one
// at a time for the scores, each warp a quarter of the keys one row at a time for P V, ~256
// dependent loads a warp): the GPU, not the host, was then most of a decode step.
// The first query head of each KV head writes that head's K and V rows.
// This file plans and launches the kernel; its device code is attention_gqa_cuda_device.cc.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/env.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "ops/attention_gqa_cuda_internal.h"
#include "ops/attention_gqa_step.h"
#include "ops/attention_internal.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

constexpr int kMaxKeys = 8192;  // 32 KiB of float scores in static shared memory
constexpr int kMaxHeadSize = 128;
constexpr int kMaxSharedBytes = 48 * 1024;  // static shared memory a block may declare

/** A block's threads (NT): 512, or ONNXRUNTIME_EP_MLX_DECODE_THREADS=128 or 256. A step launches
 *  only B x H blocks (32 of an H100's 132 SMs at batch 1), so a block's threads are what keeps
 *  past rows in flight: in blocks of 128 the kernel read its 1 MB of KV a layer at ~24 GB/s, 42 us
 *  (the twenty-second and twenty-seventh sessions' H100 timelines, 0.93 ms of a fp16 TinyLlama
 *  step's 2.4 ms of kernel time); blocks of 512 took the step from 5.29 to 4.25 ms (medians of
 *  two A B A B rounds, twenty-seventh session, docs/performance.md) and pass the GPU parity
 *  (twenty-fourth session). Not 1024: the kernel takes up to 94 registers a thread on sm_90a, and
 *  a block of 1024 such threads would not launch (65,536 a block; gqa_decode_kernel_test.cc). */
int DecodeThreads() {
  static const int threads = [] {
    const std::string v = EnvString(env::kDecodeThreads);
    return v == "128" ? 128 : v == "256" ? 256 : 512;
  }();
  return threads;
}

/** The header's Lanes<D, CH, NT>::U: passes of loads a thread issues before their arithmetic. */
constexpr int kRowsInFlight = 8;

/** ONNXRUNTIME_EP_MLX_DECODE_SPLIT_ROWS=N: past rows per block (0, the default: a block per head).
 *  Not faster on the thirtieth session's H200: 25.9 us a TinyLlama layer in splits of 256 rows
 *  (20.8 unsplit on an H100): a block's chain of dependent steps sets its time, not its rows. */
int DecodeSplitRows() {
  static const int rows = [] {
    const std::string v = EnvString(env::kDecodeSplitRows);
    return !v.empty() && v.size() < 6 && v.find_first_not_of("0123456789") == std::string::npos ? std::stoi(v)
                                                                                                : 0;
  }();
  return rows;
}

/** Blocks per query head for `past` rows in blocks of `rows` (at most kMaxSplits; 1 for none). */
constexpr int kMaxSplits = 64;
int SplitsOf(int past, int rows) { return rows <= 0 ? 1 : std::min(kMaxSplits, (past + rows - 1) / rows); }

/** The header's Lanes<D, CH, NT>::KEYS: past rows a pass of the block. */
int KeysPerPass(int D, int ch, int nt) {
  const int chunks = D / ch;
  const int sub = chunks > 16 ? 32 : chunks > 8 ? 16 : chunks > 4 ? 8 : chunks > 2 ? 4 : chunks;
  return nt / sub;
}

/** decode_step's static shared memory in bytes: scores, the query and key rows, the reductions'
 *  slots and the groups' partial sums (GROUPS * D floats). */
int SharedBytes(int D, int cap, int nt, int item_size) {
  const int wide = D % (16 / item_size) == 0 ? 16 / item_size : 1;
  const int groups = std::max(KeysPerPass(D, wide, nt), KeysPerPass(D, 1, nt));
  return 4 * (cap + 2 * D + 32 + groups * D);
}


// The body MLX's cuda_kernel wraps: its inputs, outputs and template constants by name. Absent
// caches and position_ids are other inputs passed in their place (never read). The split kernel
// has one more input (counters, which its blocks change: see merge_splits) and output (parts).
std::string Body(bool split) {
  return std::string(R"(
  const mlx_ep_gqa::StepShape shape{H, HKV, P, MAXPOS, WINDOW, POS_STRIDE, QS, QO, KS, KO, VS, VO,
                                    __int_as_float(SCALE_BITS)};
  mlx_ep_gqa::decode_step<D, LCAP, ROT, INTERLEAVED, NT, )") +
         (split ? "SPLITS" : "1") + R"(>(shape, q_in, k_in, v_in, past_k, past_v, seqlens,
      total_len, reinterpret_cast<const T*>(cos_cache), reinterpret_cast<const T*>(sin_cache),
      reinterpret_cast<const int64_t*>(pos_ids), out, k_row, v_row, )" +
         (split ? "const_cast<int*>(counters), parts" : "nullptr, nullptr") + ");\n";
}

const mx::fast::CustomKernelFunction& StepKernel(bool split) {
  static const std::vector<std::string> inputs = {"q_in",      "k_in",    "v_in",      "past_k",
                                                  "past_v",    "seqlens", "total_len", "cos_cache",
                                                  "sin_cache", "pos_ids"};
  static const mx::fast::CustomKernelFunction whole = mx::fast::cuda_kernel(
      "mlx_ep_gqa_decode_step", inputs, {"out", "k_row", "v_row"}, Body(false), GqaDecodeHeader(),
      /*ensure_row_contiguous=*/true);
  static const mx::fast::CustomKernelFunction in_splits = [] {
    std::vector<std::string> with_counters = inputs;
    with_counters.push_back("counters");
    return mx::fast::cuda_kernel("mlx_ep_gqa_decode_split", with_counters, {"out", "k_row", "v_row", "parts"},
                                 Body(true), GqaDecodeHeader(), /*ensure_row_contiguous=*/true);
  }();
  return split ? in_splits : whole;
}

/** The rotation's constants (ROT, MAXPOS, POS_STRIDE), or nullopt for caches or position_ids
 *  of other shapes than the kernel reads. */
std::optional<std::array<int, 3>> RotationConstants(const GqaDecodeStepInputs& in) {
  if (!in.cos_cache) return in.position_ids ? std::nullopt : std::optional(std::array<int, 3>{0, 1, 0});
  const mx::array &c = *in.cos_cache, &s = *in.sin_cache;
  if (c.ndim() != 2 || s.shape() != c.shape() || c.shape(0) == 0 || 2 * c.shape(1) > in.head_size)
    return std::nullopt;
  int pos_stride = 0;
  if (const std::optional<mx::array>& ids = in.position_ids) {
    if (ids->ndim() != 2 || ids->shape(0) != in.query.shape(0) || ids->shape(1) < 1 ||
        ids->dtype() != mx::int64)
      return std::nullopt;
    pos_stride = ids->shape(1);
  }
  return std::array<int, 3>{2 * c.shape(1), c.shape(0), pos_stride};
}

}  // namespace

std::string GqaDecodeKernelSourceForTests(bool split) {
  return GqaDecodeHeader() + "\n// kernel body:\n" + Body(split);
}

std::optional<KernelLaunch> PlanDecodeStep(const GqaDecodeStepInputs& in, int split_rows, bool grouped) {
  const mx::array &q = in.query, &past_k = in.past_key, &past_v = in.past_value;
  const int D = in.head_size, batch = q.ndim() == 3 ? q.shape(0) : 0;
  if (batch == 0 || D < 1 || D > kMaxHeadSize || in.kv_heads < 1 || in.heads % in.kv_heads != 0)
    return std::nullopt;
  const mx::Dtype t = q.dtype();
  if (!IsCudaKernelFloat(t) || past_k.dtype() != t || past_v.dtype() != t) return std::nullopt;
  const mx::Shape past_shape = {batch, in.kv_heads, past_k.ndim() == 4 ? past_k.shape(2) : 0, D};
  if (past_k.shape() != past_shape || past_v.shape() != past_shape) return std::nullopt;
  const int past = past_shape[2], keys = past + 1;
  if (past == 0 || keys > kMaxKeys) return std::nullopt;
  const std::optional<std::array<int, 6>> starts =
      q.shape(1) == 1 ? QkvRowStarts(q, in.key, in.value, in.heads, in.kv_heads, D) : std::nullopt;
  const std::optional<std::array<int, 3>> rotation = RotationConstants(in);
  if (!starts || !rotation || in.seqlens_k.size() != static_cast<size_t>(batch) ||
      in.total_length.size() != 1)
    return std::nullopt;
  // Template constants become part of the kernel's name: no minus sign (a negative scale's bits).
  int32_t scale_bits;
  std::memcpy(&scale_bits, &in.scale, sizeof scale_bits);
  if (!(in.scale > 0.f) || !std::isfinite(in.scale) || in.window < 0) return std::nullopt;
  const mx::array& placeholder = in.seqlens_k;  // for absent inputs: never read
  const auto& [rot, max_pos, pos_stride] = *rotation;
  KernelLaunch plan{
      {q, in.key ? *in.key : q, in.value ? *in.value : q, past_k, past_v, in.seqlens_k, in.total_length,
       in.cos_cache ? *in.cos_cache : placeholder, in.sin_cache ? *in.sin_cache : placeholder,
       in.position_ids ? *in.position_ids : placeholder},
      {{batch, 1, in.heads * D}, {batch, in.kv_heads, 1, D}, {batch, in.kv_heads, 1, D}},
      {t, t, t},
      0,
      0,
      {{"D", D},
       {"ROT", rot},
       {"INTERLEAVED", in.interleaved},
       {"H", in.heads},
       {"HKV", in.kv_heads},
       {"P", past},
       {"MAXPOS", max_pos},
       {"WINDOW", in.window},
       {"POS_STRIDE", pos_stride},
       {"SCALE_BITS", scale_bits},
       {"T", t}}};
  for (auto& constant : QkvRowConstants(*starts)) plan.constants.push_back(std::move(constant));
  if (grouped) return PlanGroupedDecodeStep(std::move(plan), batch, in.heads, in.kv_heads, D, past);
  const int splits = SplitsOf(past, split_rows), chunk = (past + splits - 1) / splits;
  const int cap = std::max(256, static_cast<int>(std::bit_ceil(static_cast<unsigned>(chunk + 1))));
  // The largest block up to DecodeThreads() whose static shared memory fits (128 always does:
  // kMaxKeys; long caches of wide heads take 256 or 128); in splits, the smallest whose one pass
  // of loads covers a split's rows.
  int nt = DecodeThreads();
  while (nt > 128 && SharedBytes(D, cap, nt, static_cast<int>(t.size())) > kMaxSharedBytes) nt /= 2;
  if (splits > 1) {
    const int wide = D % (16 / static_cast<int>(t.size())) == 0 ? 16 / static_cast<int>(t.size()) : 1;
    const int most = nt;
    for (nt = 128; nt < most && KeysPerPass(D, wide, nt) * kRowsInFlight < chunk;) nt *= 2;
  }
  plan.threads = batch * in.heads * splits * nt;
  plan.per_block = nt;
  plan.constants.push_back({"LCAP", cap});
  plan.constants.push_back({"NT", nt});
  if (splits > 1) {
    // Each query head's count of finished splits, zero between launches: the last block of a head
    // sets it back (merge_splits). A constant of the traced graph, so one buffer per node and
    // trace, which only this node's launches (in stream order) touch.
    const int heads = batch * in.heads;
    plan.inputs.push_back(mx::array(std::vector<int32_t>(heads, 0).data(), {heads}, mx::int32));
    plan.output_shapes.push_back({heads * splits * (D + 2)});
    plan.output_dtypes.push_back(mx::float32);
    plan.constants.push_back({"SPLITS", splits});
  }
  return plan;
}

std::optional<GqaDecodeStep> DecodeStepByKernel(const GqaDecodeStepInputs& in, mx::Stream s) {
  if (!CudaKernelsAvailable(s)) return std::nullopt;
  if (DecodeGroupedEnabled())
    if (std::optional<KernelLaunch> grouped = PlanDecodeStep(in, 0, true)) {
      const std::vector<mx::array> outs = LaunchKernel(GroupedStepKernel(), *grouped, s);
      return GqaDecodeStep{outs[0], outs[1], outs[2]};
    }
  std::optional<KernelLaunch> plan = PlanDecodeStep(in, DecodeSplitRows());
  if (!plan) return std::nullopt;
  // PlanDecodeStep names SPLITS (and adds the counters and the partial results) only for a launch
  // in blocks of past rows.
  const bool split = std::any_of(plan->constants.begin(), plan->constants.end(),
                                 [](const auto& constant) { return constant.first == "SPLITS"; });
  const std::vector<mx::array> outs = LaunchKernel(StepKernel(split), *plan, s);
  return GqaDecodeStep{outs[0], outs[1], outs[2]};
}

}  // namespace mlx_ep
