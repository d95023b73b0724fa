// GroupQueryAttention's attention core on GPUs through mx::fast::scaled_dot_product_attention
// (fused_gpu_internal.h has the switch; attention_contrib_gqa.cc the op and its semantics).
//
// What runs fused on MLX's CUDA backend (mlx/backend/cuda/scaled_dot_product_attention.cpp/.cu,
// MLX 0.32): cuDNN's SDPA for float16/bfloat16 with head_size a multiple of 8 up to 128, with an
// array mask (additive; MLX turns a bool one into 0/-inf) or causal, for any query length
// but 1; sdpa_vector (query length < 4, head_size 64/96/128, float32 accumulation throughout: its
// `typedef float U` for q, k, scores, the online softmax and the output accumulator) only
// *without* an array mask, and cuDNN's decoding path likewise only without one (and for K/V that
// are slices of a buffer of 256-row steps). GroupQueryAttention always needs a mask: the shared
// buffer holds stale rows past each entry's length (seqlens_k is data, so K cannot be sliced to
// it without a compile per step), and batch entries end at different lengths. Hence:
//  - the keys are the past buffer and the new rows concatenated ([B, Hkv, P + S, D], one copy
//    kernel per K and V, in their own dtype, no float32 cast of the cache). Writing the new rows
//    into a view of the buffer first (Present) costs ~6 kernels over the same rows and an update
//    of ORT's buffer cannot be read back inside the graph; with concatenation the stale rows and
//    the unwritten future rows are masked out instead, exactly as the composed core does;
//  - the mask is additive, [B, 1, S, P + S] (0 or T's lowest), built from the step facts and
//    SharedArange only, so it is the same array in every layer once MLX's compile has merged equal
//    subgraphs (computed once per step);
//  - a decode step (S = 1) duplicates its query row (S = 2: cuDNN's prompt path, which takes the
//    mask) and keeps row 0: the vector kernels would drop to MLX's unfused fallback, which
//    computes the scores in T. With rotary embedding the rotation's fused kernel writes both rows
//    (GqaCoreInputs::q_doubled), so the duplicate costs no copy kernel. Or, with
//    ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=gemv, no cuDNN at all: DecodeCoreByGemv (off: slower on
//    the H200, more primitives than it saves). On MLX's CUDA backend the whole decode step is one
//    custom CUDA kernel before any of this (DecodeStepByKernel, attention_gqa_cuda.cc; the
//    default, =sdpa for the cuDNN path).
// Numerics against ORT (float32 scores): cuDNN accumulates Q K^T in float32, scales by `scale`
// in float32, adds the mask and runs the softmax in float32; like every FlashAttention-style
// kernel (and ORT's own CUDA EP) it rounds the probabilities to T for the P V product
// (accumulated in float32), and rounds the output once to T. That last rounding of P is the one
// difference from the composed core: the GPU parity run is the judge, and
// ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=0 restores the composed core.
// Left composed (nullopt): float32 (no fused kernel takes a mask: MLX's fallback would be the
// composed form again), head_size not a multiple of 8 or above 128, softcap (no hook in the fused
// kernels), attention_bias (expressible as an additive mask, not done yet), head_sink and
// smooth_softmax (MLX passes sinks to cuDNN as sink tokens, the same extra logit as ORT's, but
// MLX's tests cover sinks only without a mask; cuDNN refusing sink tokens with a bias would fail
// when the graph is built during evaluation, an error rather than a fallback). If MLX finds no
// fused kernel for a case (force_fused throws at trace time), the composed core runs too.
// On MLX's CPU device (ONNXRUNTIME_EP_MLX_FUSED_GPU_PATHS=force) the same graph runs MLX's
// fallback, which rounds q * scale and the scores to T (float16 parity held in the tests anyway);
// "force32" feeds it float32 to test the masks at the composed core's tolerances.
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/env.h"
#include "mlx/fast.h"
#include "ops/attention_gqa_prefill.h"
#include "ops/attention_gqa_step.h"
#include "ops/fused_gpu_internal.h"

namespace mlx_ep {
namespace {

constexpr size_t kBiasInput = 10, kHeadSinkInput = 11;

/** Which of the concatenated keys (past buffer rows j, then new row s' at offset_b + s') query
 *  row s attends, [B, 1, S, P + S] bool, and [B, 1, S, 1] whether it attends any: the composed
 *  core's KeyMask (attention_contrib_gqa.cc) over the concatenated key axis. */
std::pair<mx::array, mx::array> ConcatKeyMask(const OpContext& c, const GqaCoreInputs& in, int seq,
                                              int past_len) {
  const mx::Stream s = c.stream;
  const mx::array one(1, mx::int32), zero(0, mx::int32);
  const mx::array row = mx::reshape(SharedArange(seq), {1, 1, seq, 1}, s);
  const mx::array causal_end = mx::add(mx::add(in.offset, row, s), one, s);
  const mx::array end = mx::minimum(causal_end, in.total, s);
  mx::array start = zero;
  const int64_t window = c.node.AttrInt("local_window_size", -1);
  if (window > 0) start = mx::subtract(causal_end, mx::array(static_cast<int>(window), mx::int32), s);
  // Key positions in present and whether each is a valid key: a past row below the offset, a new
  // row inside present.
  const int batch = in.offset.shape(0);
  mx::array at = mx::add(in.offset, mx::reshape(SharedArange(seq), {1, 1, 1, seq}, s), s);  // [B, 1, 1, S]
  mx::array valid =
      mx::logical_and(mx::greater_equal(at, zero, s), mx::less(at, mx::array(in.len, mx::int32), s), s);
  if (past_len > 0) {
    const mx::array j = mx::reshape(SharedArange(past_len), {1, 1, 1, past_len}, s);
    at = mx::concatenate({mx::broadcast_to(j, {batch, 1, 1, past_len}, s), at}, 3, s);
    valid = mx::concatenate({mx::less(j, in.offset, s), valid}, 3, s);
  }
  const mx::array allowed =
      mx::logical_and(valid, mx::logical_and(mx::less(at, end, s), mx::greater_equal(at, start, s), s), s);
  return {allowed, mx::less(start, end, s)};
}

/** ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=gemv: a decode step's core as two batched one-row
 *  products in float32 (DecodeCoreByGemv) instead of cuDNN's masked path; default off until it
 *  is measured on a GPU. */
bool DecodeByGemv() {
  static const bool on = EnvString(env::kDecodeAttention) == "gemv";
  return on;
}

/** A decode step's core (S = 1) in float32 from MLX ops whose products are one row each, with B
 *  a transposed view: MLX's CUDA backend runs them as its gemv kernel. On the H200 one masked
 *  cuDNN attention cost 53.6 µs of host time, a gemv 6.2 µs and an elementwise kernel ~4 µs
 *  (bench/mlx_primitive_cost.py); this core is ~7 kernels. Numerics: the scores, the softmax and
 *  P V in float32 (the composed core's and ORT's), where cuDNN rounds P to T. Returns [B, H, 1, D]
 *  float32, the key mask applied (`allowed` [B, 1, 1, P + S]). */
mx::array DecodeCoreByGemv(const mx::array& q, const mx::array& keys, const mx::array& values,
                           const mx::array& allowed, float scale, mx::Stream s) {
  const int batch = q.shape(0), heads = q.shape(1), dim = q.shape(3);
  const int kv_heads = keys.shape(1), group = heads / kv_heads, len = keys.shape(2);
  // Query heads grouped under their key head: [B, Hkv, G, 1, D].
  const mx::array q5 = mx::reshape(mx::astype(q, mx::float32, s), {batch, kv_heads, group, 1, dim}, s);
  // K^T as a view of K in float32 ([B, Hkv, 1, D, L]): B of a one-row product, transposed.
  const mx::array k5 = mx::expand_dims(mx::astype(keys, mx::float32, s), 2, s);
  mx::array scores = mx::matmul(q5, mx::swapaxes(k5, -1, -2, s), s);  // [B, Hkv, G, 1, L]
  const mx::array mask = mx::reshape(allowed, {batch, 1, 1, 1, len}, s);
  scores = mx::where(mask, mx::multiply(scores, mx::array(scale, mx::float32), s),
                     mx::array(mx::finfo(mx::float32).min, mx::float32), s);
  const mx::array probs = mx::softmax(scores, {-1}, /*precise=*/true, s);
  // V cast into [B, Hkv, D, L] (one kernel, reading V transposed), read as its [L, D] view: B
  // of the second one-row product, transposed too.
  const mx::array vt = mx::astype(mx::swapaxes(values, -1, -2, s), mx::float32, s);
  const mx::array v5 = mx::expand_dims(mx::swapaxes(vt, -1, -2, s), 2, s);  // [B, Hkv, 1, L, D]
  const mx::array out = mx::matmul(probs, v5, s);                           // [B, Hkv, G, 1, D]
  return mx::reshape(out, {batch, heads, 1, dim}, s);
}

/** True when the node's attention is what the fused kernels compute (see the top). */
bool FusedCoreApplies(const OpContext& c, const GqaCoreInputs& in) {
  const mx::Dtype t = in.q.dtype();
  const int head_size = in.q.shape(3);
  // float32 only to test the masks on the CPU ("force32"; on a GPU MLX finds no fused kernel).
  if (t != mx::float16 && t != mx::bfloat16 && !(t == mx::float32 && FusedGpuPathsFloat32())) return false;
  if (head_size % 8 != 0 || head_size > 128 || in.v.shape(3) != head_size) return false;
  const Node& n = c.node;
  if (n.AttrFloat("softcap", 0.f) > 0.f || n.AttrInt("smooth_softmax", 0) == 1) return false;
  return !c.has_input(kBiasInput) && !c.has_input(kHeadSinkInput);
}

/** cuDNN's masked attention over the concatenated keys; `out` [B, H, S, D]. */
std::optional<mx::array> AttendByCudnn(const GqaCoreInputs& in, mx::array keys, mx::array values,
                                       mx::array allowed, float scale, mx::Stream s) {
  const int seq = in.q.shape(2);
  mx::array q = in.q;
  if (seq == 1) {  // see the top: cuDNN's path for query rows > 1 takes the mask
    q = in.q_doubled ? *in.q_doubled : mx::concatenate({q, q}, 2, s);
    allowed = mx::concatenate({allowed, allowed}, 2, s);
  }
  if (FusedGpuPathsFloat32()) {
    q = mx::astype(q, mx::float32, s);
    keys = mx::astype(keys, mx::float32, s);
    values = mx::astype(values, mx::float32, s);
  }
  // Additive in the attention's dtype, [B, 1, S, P + S]: MLX would turn a bool mask into one
  // itself, after broadcasting it over the heads (a [B, H, S, P + S] array per layer); this one is
  // broadcast as a view and shared by the layers. The lowest finite value rather than -inf: a
  // fully masked key tile then never gives exp(-inf - -inf) in a flash kernel's running max,
  // and exp(lowest - max) is 0 in float32 wherever a row has a key.
  const mx::Dtype mask_type = q.dtype();
  const mx::array mask =
      mx::where(allowed, mx::array(0.f, mask_type), mx::array(mx::finfo(mask_type).min, mask_type), s);
  std::optional<mx::array> y;
  if (FusedGpuPathsOnCpu()) {
    y = mx::fast::scaled_dot_product_attention(q, keys, values, scale, "array", mask, std::nullopt, false, s);
  } else {
    try {
      // force_fused: MLX throws (at trace time) instead of silently using its unfused fallback.
      y = mx::fast::scaled_dot_product_attention(q, keys, values, scale, "array", mask, std::nullopt, true,
                                                 s);
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
  }
  if (seq == 1) y = mx::slice(*y, {0, 0, 0, 0}, {y->shape(0), y->shape(1), 1, y->shape(3)}, s);
  return y;
}

}  // namespace

bool DecodeStepByKernelWanted() {
  // The default since the sixteenth session's H200 run (TinyLlama decode 6.67 -> 6.06 ms fp16,
  // 7.83 -> 7.31 int4; docs/performance.md); "sdpa" keeps cuDNN's masked attention, "gemv" the
  // one-row products.
  static const bool on = [] {
    const std::string mode = EnvString(env::kDecodeAttention);
    return mode.empty() || mode == "kernel";
  }();
  return on && UseFusedGpuPaths();
}

std::optional<mx::array> AttendGqaFused(const OpContext& c, const GqaCoreInputs& in) {
  if (!UseFusedGpuPaths() || !FusedCoreApplies(c, in)) return std::nullopt;
  const mx::Stream s = c.stream;
  const mx::Dtype t = in.q.dtype();
  const int seq = in.q.shape(2), past_len = in.past_k ? in.past_k->shape(2) : 0;
  auto [allowed, any] = ConcatKeyMask(c, in, seq, past_len);
  const float scale_attr = c.node.AttrFloat("scale", 0.f);
  const float scale = scale_attr == 0.f ? 1.f / std::sqrt(static_cast<float>(in.q.shape(3))) : scale_attr;
  const mx::array keys = past_len ? mx::concatenate({*in.past_k, in.k}, 2, s) : in.k;
  const mx::array values = past_len ? mx::concatenate({*in.past_v, in.v}, 2, s) : in.v;
  std::optional<mx::array> y = seq == 1 && DecodeByGemv()
                                   ? DecodeCoreByGemv(in.q, keys, values, allowed, scale, s)
                                   : AttendByCudnn(in, keys, values, allowed, scale, s);
  if (!y) return std::nullopt;
  const mx::array& out = *y;
  // A row that attends no key (a padding row of a prompt with a short window) is zero, as in ORT.
  // The select writes [B, S, H, D] and the core returns its [B, H, S, D] view: the caller's
  // MergeHeads (transpose, reshape to [B, S, H * D]) is then free, where for S > 1 it copies a
  // [B, H, S, D] result.
  const std::vector<int> heads_last = {0, 2, 1, 3};
  if (HeadsLastKernelWanted()) {
    const int batch = out.shape(0), seq_len = out.shape(2);
    const mx::array keep = mx::reshape(mx::broadcast_to(any, {batch, 1, seq_len, 1}, s), {batch, seq_len}, s);
    if (std::optional<mx::array> rows = HeadsLastByKernel(out, keep, t, s))
      return mx::transpose(*rows, heads_last, s);
  }
  const mx::array rows = mx::where(mx::transpose(any, heads_last, s),
                                   mx::astype(mx::transpose(out, heads_last, s), t, s), mx::array(0, t), s);
  return mx::transpose(rows, heads_last, s);
}

}  // namespace mlx_ep
