// Op family: GroupQueryAttention (com.microsoft 1), following ORT's CPU kernel.
//
//  - query [B, S, H * D] with key/value [B, S, Hkv * D], or packed QKV [B, S, (H + 2 Hkv) * D]
//    (key and value absent). Query head h reads kv head h / (H / Hkv).
//  - seqlens_k [B] (int32, total length - 1 per batch entry) and total_sequence_length (int32
//    scalar, the batch maximum) are data: they change every decode step, and the compiled graph
//    must not. Every decision ORT takes on them is an MLX computation here:
//      first prompt  = (S == total_sequence_length)
//      offset_b      = first prompt ? 0 : seqlens_k[b] + 1 - S   (where the new rows go)
//      positions     = offset_b + s   (rotary; padding rows of a prompt too)
//  - past_key/past_value [B, Hkv, P, D] are the shared buffer layout: present has the same shape,
//    rows [0, offset_b) copied from past, the S new rows written at offset_b, later rows zero (as
//    ORT's CPU kernel writes them when present is a buffer of its own). Without past, present is
//    the new K/V ([B, Hkv, S, D]). present is declared an in-place update of past (OpContext::
//    UpdateInPlace: the new rows at offset_b): when ORT hands the partition past's own buffer as
//    present's (onnxruntime-genai's past_present_share_buffer), the runner writes only those rows
//    and never evaluates present; the rows after them keep what the buffer held, as ORT's CPU
//    kernel leaves them when it sees one buffer (docs/kv_cache.md).
//  - Attention reads the past rows j < offset_b from past_key/past_value themselves and the new
//    rows apart (one softmax over both score blocks), never present: no copy of the cache.
//  - ORT sizes present as max(total_sequence_length, P) (S without past), a value a compiled graph
//    cannot have as a shape. The translation fixes it at P (S without past); an input whose
//    total_sequence_length says otherwise (the non-shared layout, present = past + new) fails the
//    run with the reason (a runtime check, before anything is written) instead of giving plausible
//    wrong numbers -- unless the trace knows total_sequence_length
//    on its host lane (genai's builder computes it from the attention mask's shape, which folds):
//    then present is sized max(total, P) as ORT does, and both layouts are exact. When the mask's
//    length is a dynamic dim of the partition (docs/dynamic_shapes.md), the total is data again:
//    present is P and the function assumes total <= P (a run where it is not is retraced).
//  - Query row s of batch b attends keys [start, end): end = min(offset_b + s + 1, seqlens_k[b] + 1),
//    start = offset_b + s + 1 - local_window_size with a window, else 0; none (a padding row of
//    a prompt with a short window) gives zeros, as in ORT.
//  - Scores are float32 as in ORT (float16 inputs are widened first): scale * Q K^T, then
//    softcap * tanh(x / softcap), then + attention_bias, softmax over the attended keys with
//    head_sink (or 0 for smooth_softmax) as an extra logit in the denominator, times V, rounded
//    once to T.
//  - do_rotary rotates Q and K (not V) with cos_cache/sin_cache [max_position, rotary_dim / 2] at
//    the positions above, in float32 rounded to T (ORT stores the rotated Q/K in T). position_ids
//    (int64 data) replace them: [b, s] per token, except on the first prompt, where ORT reads only
//    position_ids[0, 0] (positions [0, 0] + s for every entry).
//  - Declined: quantized caches (k_scale/v_scale, k_quant_type/v_quant_type),
//    q_norm_weight/k_norm_weight, sliding_window_cache, causal=0, qk_output/output_qk, a key
//    of sequence length 0 (the "shared KV" form), local_window_size 0 and smooth_softmax together
//    with head_sink (ORT rejects it).
#include <cmath>

#include "ops/attention_contrib_gqa_internal.h"
#include "ops/attention_gqa_cpu.h"
#include "ops/attention_gqa_prefill.h"
#include "ops/attention_gqa_step.h"
#include "ops/attention_internal.h"
#include "ops/fused_gpu_internal.h"
#include "ops/registry.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

/** Q [B, H, S, D], K and V [B, Hkv, S, D] from the separate or packed inputs. */
struct Heads {
  mx::array q, k, v;
};

Heads SplitQkv(const OpContext& c, int heads, int kv_heads) {
  const mx::Stream s = c.stream;
  const mx::array& query = c.input(kQuery);
  if (query.ndim() != 3) c.Fail("query must be [batch, sequence, hidden]");
  if (c.has_input(kKey)) {
    Heads h{SplitHeads(c, query, heads, "query"), SplitHeads(c, c.input(kKey), kv_heads, "key"),
            SplitHeads(c, c.input(kValue), kv_heads, "value")};
    if (h.k.shape(0) != h.q.shape(0) || h.k.shape(2) != h.q.shape(2) || h.k.shape(3) != h.q.shape(3) ||
        h.v.shape() != h.k.shape())
      c.Fail("key/value must be [batch, sequence, kv_num_heads * head_size] like query");
    return h;
  }
  const mx::array all = SplitHeads(c, query, heads + 2 * kv_heads, "packed QKV");
  const int B = all.shape(0), S = all.shape(2), D = all.shape(3);
  auto part = [&](int from, int to) { return mx::slice(all, {0, from, 0, 0}, {B, to, S, D}, s); };
  return {part(0, heads), part(heads, heads + kv_heads), part(heads + kv_heads, heads + 2 * kv_heads)};
}

/** The step's facts derived from seqlens_k / total_sequence_length, as arrays. */
struct Step {
  mx::array total;   ///< [B, 1, 1, 1] int32: seqlens_k + 1
  mx::array offset;  ///< [B, 1, 1, 1] int32: where the new rows go (0 on the first prompt)
  mx::array first;   ///< scalar bool: the first prompt (S == total_sequence_length)
};

Step StepOf(const OpContext& c, int batch, int seq) {
  const mx::Stream s = c.stream;
  const mx::array& seqlens = c.input(kSeqlensK);
  if (seqlens.size() != static_cast<size_t>(batch)) c.Fail("seqlens_k must hold batch_size values");
  if (c.input(kTotalLength).size() != 1) c.Fail("total_sequence_length must hold one value");
  const mx::array total = mx::add(mx::reshape(seqlens, {batch, 1, 1, 1}, s), mx::array(1, mx::int32), s);
  const mx::array first = mx::equal(mx::reshape(c.input(kTotalLength), {}, s), mx::array(seq, mx::int32), s);
  const mx::array offset =
      mx::where(first, mx::array(0, mx::int32), mx::subtract(total, mx::array(seq, mx::int32), s), s);
  return {total, offset, first};
}

/** The rotation's cos/sin cache rows of the step's tokens, [B, 1, S] int32: offset_b + s, or
 *  position_ids (on the first prompt only position_ids[0, 0] + s, as ORT reads them), clamped to
 *  the caches' rows. */
mx::array Positions(const OpContext& c, const Step& st, int batch, int seq) {
  const mx::Stream s = c.stream;
  const mx::array &cos_cache = c.input(kCos), &sin_cache = c.input(kSin);
  if (cos_cache.ndim() != 2 || cos_cache.shape() != sin_cache.shape() || cos_cache.shape(0) == 0)
    c.Fail("cos_cache/sin_cache must be [max_position, rotary_dim / 2]");
  const mx::array i = mx::reshape(StepArange(seq, s), {1, 1, seq, 1}, s);
  mx::array pos = mx::add(st.offset, i, s);  // [B, 1, S, 1]
  if (c.has_input(kPositionIds)) {
    const mx::array& ids = c.input(kPositionIds);
    if (ids.ndim() != 2 || ids.shape(0) != batch || ids.shape(1) < seq)
      c.Fail("position_ids must be [batch, sequence_length]");
    const mx::array given = mx::reshape(
        mx::astype(mx::slice(ids, {0, 0}, {ids.shape(0), seq}, s), mx::int32, s), {batch, 1, seq, 1}, s);
    // On the first prompt ORT reads only position_ids[0, 0]: positions [0, 0] + s for every entry.
    const mx::array first_row = mx::add(mx::slice(given, {0, 0, 0, 0}, {1, 1, 1, 1}, s), i, s);
    pos = mx::where(st.first, first_row, given, s);
  }
  // MLX's gather does not check bounds (ORT errors on positions past the cache): clamp.
  pos = mx::clip(pos, mx::array(0, mx::int32), mx::array(cos_cache.shape(0) - 1, mx::int32), s);
  return mx::reshape(pos, {batch, 1, seq}, s);
}

/** Q or K [B, heads, S, D] rotated at `pos` (Positions); with `copies` > 1 (S = 1 only) the one
 *  row rotated `copies` times, [B, heads, copies, D], written by the same kernel (the fused
 *  decode's doubled query, attention_gqa_fused.cc, without a copy of its own). */
mx::array Rotate(const OpContext& c, const mx::array& x, const mx::array& pos, int copies = 1) {
  const mx::Stream s = c.stream;
  const mx::array &cos_cache = c.input(kCos), &sin_cache = c.input(kSin);
  const int rot = 2 * cos_cache.shape(1);
  if (rot > x.shape(3)) c.Fail("rotary_dim exceeds head_size");
  auto rows = [&](const mx::array& cache) { return mx::astype(mx::take(cache, pos, 0, s), mx::float32, s); };
  const mx::array rotated =
      copies == 1 ? x : mx::broadcast_to(x, {x.shape(0), x.shape(1), copies, x.shape(3)}, s);
  return ApplyRotary(rotated, rows(cos_cache), rows(sin_cache), rot,
                     c.node.AttrInt("rotary_interleaved", 0) == 1, s);
}

/** A prompt's Q, K (rotated) and V [B, heads, S, D] from one custom CUDA kernel over the node's
 *  inputs (attention_gqa_prefill.h; the default, ONNXRUNTIME_EP_MLX_PREFILL_ROTATE_KERNEL=0
 *  turns it off), or nullopt. */
std::optional<GqaRotatedQkv> RotateByKernel(const OpContext& c, const mx::array& positions, int heads,
                                            int kv_heads, int head_size) {
  if (!PrefillRotateKernelWanted() || !CudaKernelsAvailable(c.stream)) return std::nullopt;
  const mx::array& query = c.input(kQuery);
  const int batch = query.shape(0), seq = query.shape(1);
  const mx::array pos = mx::reshape(positions, {batch, seq}, c.stream);
  auto optional = [&](size_t i) {
    return c.has_input(i) ? std::optional<mx::array>(c.input(i)) : std::nullopt;
  };
  return PrefillRotateByKernel({query, optional(kKey), optional(kValue), pos, c.input(kCos), c.input(kSin),
                                heads, kv_heads, head_size, c.node.AttrInt("rotary_interleaved", 0) == 1},
                               c.stream);
}

/** present's length L: ORT's max(total_sequence_length, P) when the trace knows the total (it is
 *  folded from the attention mask's shape in genai's layout, so the compiled graph is already
 *  specialised on it), else P, the shared-buffer layout (checked at run time, see the header). */
int PresentLength(const OpContext& c) {
  const int past_len = c.input(kPastKey).ndim() == 4 ? c.input(kPastKey).shape(2) : 0;
  const Tensor* total = c.host_if_known(kTotalLength);
  if (!total || total->NumElements() != 1) return past_len;
  return std::max<int>(past_len, static_cast<int>(total->ToInt64()[0]));
}

/** True when the trace knows this is the first prompt: total_sequence_length on its host lane
 *  (folded from the attention mask's shape in genai's layout, so every run of this trace has it)
 *  equal to the sequence length, ORT's own test. Then offset_b is 0 for every entry and no past row
 *  is attended, so the attention core can read the new rows alone: no concatenation with the past
 *  buffer on the fused GPU path (88 copies and four fifths of cuDNN's keys in a TinyLlama prefill
 *  of 512 tokens with a 2,048-row buffer). */
bool KnownFirstPrompt(const OpContext& c, int seq) {
  const Tensor* total = c.host_if_known(kTotalLength);
  return total && total->NumElements() == 1 && total->ToInt64()[0] == seq;
}

/** past_key/past_value [B, Hkv, L, D]: as given, or zero-padded to present's length L. */
mx::array PastRows(const OpContext& c, const mx::array& fresh, size_t past_input) {
  mx::array past = c.input(past_input);
  if (past.ndim() != 4 || past.shape(0) != fresh.shape(0) || past.shape(1) != fresh.shape(1) ||
      past.shape(3) != fresh.shape(3))
    c.Fail("past_key/past_value must be [batch, kv_num_heads, max_length, head_size]");
  const int len = PresentLength(c);
  // The non-shared layout: present = past + new rows, a buffer of its own (zero-padded here).
  if (len > past.shape(2))
    past = mx::pad(past, {{0, 0}, {0, 0}, {0, len - past.shape(2)}, {0, 0}}, mx::array(0, past.dtype()),
                   "constant", c.stream);
  return past;
}

/** present [B, Hkv, L, D] from PastRows: past rows below the offset, the new rows at it, zeros
 *  after. Attention never reads it (see Attend): in the shared-buffer layout the runner writes only
 *  the new rows into ORT's buffer and this array is not evaluated. */
mx::array Present(const OpContext& c, const mx::array& fresh, const Step& st, const mx::array& past) {
  const mx::Stream s = c.stream;
  const int len = past.shape(2), seq = fresh.shape(2);
  const mx::array j = mx::reshape(StepArange(len, s), {1, 1, len, 1}, s);
  const mx::array row = mx::subtract(j, st.offset, s);  // [B, 1, L, 1]: row of `fresh` at j
  const mx::array in_fresh = mx::logical_and(mx::greater_equal(row, mx::array(0, mx::int32), s),
                                             mx::less(row, mx::array(seq, mx::int32), s), s);
  const mx::array rows =
      mx::broadcast_to(mx::clip(row, mx::array(0, mx::int32), mx::array(seq - 1, mx::int32), s),
                       {past.shape(0), past.shape(1), len, past.shape(3)}, s);
  const mx::array written = mx::take_along_axis(fresh, rows, 2, s);
  const mx::array kept = mx::where(mx::less(j, st.offset, s), past, mx::array(0.f, past.dtype()), s);
  return mx::where(in_fresh, written, kept, s);
}

/** Which keys each query row attends, over present's positions: the past rows j < offset_b (the
 *  rest of the past buffer is stale or about to be overwritten) and the new rows at offset_b + s',
 *  each [B, 1, S, keys] bool; and [B, 1, S, 1] whether a row attends any key. */
struct KeyMasks {
  std::optional<mx::array> past;
  mx::array fresh, any;
};

KeyMasks KeyMask(const OpContext& c, const Step& st, int seq, int past_len, int len) {
  const mx::Stream s = c.stream;
  const mx::array i = mx::reshape(StepArange(seq, s), {1, 1, seq, 1}, s);
  const mx::array causal_end = mx::add(mx::add(st.offset, i, s), mx::array(1, mx::int32), s);
  const mx::array end = mx::minimum(causal_end, st.total, s);
  mx::array start = mx::array(0, mx::int32);
  const int64_t window = c.node.AttrInt("local_window_size", -1);
  // ORT places the window at the causal end, before capping it at the entry's length: a padding
  // row of a prompt may see fewer than `window` keys, or none (its output is then zero).
  if (window > 0) start = mx::subtract(causal_end, mx::array(static_cast<int>(window), mx::int32), s);
  auto attended = [&](const mx::array& pos) {
    return mx::logical_and(mx::less(pos, end, s), mx::greater_equal(pos, start, s), s);
  };
  // New row s' sits at offset_b + s' of present, when that is inside it.
  const mx::array at = mx::add(st.offset, mx::reshape(StepArange(seq, s), {1, 1, 1, seq}, s), s);
  const mx::array inside = mx::logical_and(mx::greater_equal(at, mx::array(0, mx::int32), s),
                                           mx::less(at, mx::array(len, mx::int32), s), s);
  KeyMasks m{std::nullopt, mx::logical_and(attended(at), inside, s), mx::less(start, end, s)};
  if (past_len > 0) {
    const mx::array j = mx::reshape(StepArange(past_len, s), {1, 1, 1, past_len}, s);
    m.past = mx::logical_and(attended(j), mx::less(j, st.offset, s), s);
  }
  return m;
}

/** attention_bias [B|1, H|1, S, total] as float32 columns of the past rows [.., S, past_len] (zero
 *  past its end) and of the new rows ([B, H|1, S, S], at offset_b + s'). */
std::pair<std::optional<mx::array>, mx::array> Bias(const OpContext& c, const Step& st, int batch, int seq,
                                                    int past_len, int len) {
  const mx::Stream s = c.stream;
  mx::array bias = mx::astype(c.input(kBias), mx::float32, s);
  if (bias.ndim() != 4 || bias.shape(2) != seq || bias.shape(3) > len)
    c.Fail("attention_bias must be [batch or 1, num_heads or 1, sequence, total_sequence_length]");
  if (bias.shape(3) < len)
    bias = mx::pad(bias, {{0, 0}, {0, 0}, {0, 0}, {0, len - bias.shape(3)}}, mx::array(0.f), "constant", s);
  const mx::Shape full = {batch, bias.shape(1), seq, len};
  const mx::array at = mx::clip(mx::add(st.offset, mx::reshape(StepArange(seq, s), {1, 1, 1, seq}, s), s),
                                mx::array(0, mx::int32), mx::array(len - 1, mx::int32), s);
  const mx::array fresh = mx::take_along_axis(
      mx::broadcast_to(bias, full, s), mx::broadcast_to(at, {batch, bias.shape(1), seq, seq}, s), 3, s);
  if (past_len == 0) return {std::nullopt, fresh};
  return {mx::slice(bias, {0, 0, 0, 0}, {bias.shape(0), bias.shape(1), seq, past_len}, s), fresh};
}

/** Keys and values attention reads (float32): the past rows as given (no copy of the cache) and
 *  the step's new rows, never present itself. */
struct AttendedKv {
  std::optional<mx::array> past_k, past_v;
  mx::array k, v;
};

/** softmax(scores of the past and new keys, sinks an extra logit) @ (past V; new V): one softmax
 *  over the concatenated scores (small: [B, H, S, past + S]), two products, no concatenated cache. */
mx::array Attend(const OpContext& c, const mx::array& qf, const AttendedKv& kv, const Step& st, int len) {
  const mx::Stream s = c.stream;
  const Node& n = c.node;
  const int heads = qf.shape(1), groups = heads / kv.k.shape(1), batch = qf.shape(0), seq = qf.shape(2);
  const int past_len = kv.past_k ? kv.past_k->shape(2) : 0;
  const float scale_attr = n.AttrFloat("scale", 0.f);
  const float scale = scale_attr == 0.f ? 1.f / std::sqrt(static_cast<float>(qf.shape(3))) : scale_attr;
  const mx::array q = mx::multiply(qf, mx::array(scale), s);
  auto scores_of = [&](const mx::array& k) { return GroupedMatmul(q, mx::swapaxes(k, 2, 3, s), groups, s); };
  const KeyMasks mask = KeyMask(c, st, seq, past_len, len);
  mx::array scores = scores_of(kv.k);
  mx::array allowed = mask.fresh;
  std::optional<mx::array> bias;
  if (c.has_input(kBias)) {
    auto [past_bias, fresh_bias] = Bias(c, st, batch, seq, past_len, len);
    bias =
        past_len
            ? mx::concatenate(
                  {mx::broadcast_to(*past_bias, {batch, fresh_bias.shape(1), seq, past_len}, s), fresh_bias},
                  3, s)
            : fresh_bias;
  }
  if (past_len) {
    scores = mx::concatenate({scores_of(*kv.past_k), scores}, 3, s);
    allowed = mx::concatenate({mx::broadcast_to(*mask.past, {batch, 1, seq, past_len}, s),
                               mx::broadcast_to(mask.fresh, {batch, 1, seq, seq}, s)},
                              3, s);
  }
  if (const float softcap = n.AttrFloat("softcap", 0.f); softcap > 0.f) {
    const mx::array cap(softcap);
    scores = mx::multiply(mx::tanh(mx::divide(scores, cap, s), s), cap, s);
  }
  if (bias) scores = mx::add(scores, *bias, s);
  scores = mx::where(allowed, scores, mx::array(-INFINITY), s);
  std::optional<mx::array> sinks;
  if (c.has_input(kHeadSink))
    sinks = mx::astype(mx::reshape(c.input(kHeadSink), {-1}, s), mx::float32, s);
  else if (n.AttrInt("smooth_softmax", 0) == 1)
    sinks = mx::zeros({heads}, mx::float32, s);
  if (sinks && sinks->shape(0) != heads) c.Fail("head_sink must hold num_heads values");
  if (sinks)
    scores = mx::concatenate(
        {mx::broadcast_to(mx::reshape(*sinks, {1, -1, 1, 1}, s), {batch, heads, seq, 1}, s), scores}, 3, s);
  mx::array p = mx::softmax(scores, std::vector<int>{3}, true, s);
  const int from = sinks ? 1 : 0, total = p.shape(3);
  auto part = [&](int a, int b) { return mx::slice(p, {0, 0, 0, a}, {batch, heads, seq, b}, s); };
  mx::array y = GroupedMatmul(part(from + past_len, total), kv.v, groups, s);
  if (past_len) y = mx::add(GroupedMatmul(part(from, from + past_len), *kv.past_v, groups, s), y, s);
  return mx::where(mask.any, y, mx::array(0.f), s);
}

/** The node's outputs from the attention's `out` [B, S, H * D] (T) and the step's new rows `k`,
 *  `v` [B, Hkv, S, D]: present's length checked against total_sequence_length (see the header),
 *  present declared an in-place update of past in the shared-buffer layout. */
std::vector<mx::array> Outputs(const OpContext& c, const mx::array& out, const mx::array& k,
                               const mx::array& v, const mx::array& present_k, const mx::array& present_v,
                               const Step& st) {
  const mx::Stream s = c.stream;
  const int batch = k.shape(0), seq = k.shape(2), len = present_k.shape(2);
  // The shape ORT would give present (see the header): a run whose total_sequence_length asks for
  // another fails with the reason before anything is written (never reached when the trace knew
  // the total: present was sized from it).
  const mx::array total = mx::reshape(c.input(kTotalLength), {}, s);
  const mx::array fits = c.has_input(kPastKey) ? mx::less_equal(total, mx::array(len, mx::int32), s)
                                               : mx::equal(total, mx::array(seq, mx::int32), s);
  if (const Tensor* now = c.trace_value(kTotalLength); now && now->NumElements() == 1) {
    // total_sequence_length is data only because the attention mask's length is a dynamic dim
    // (the trace of one mask length would size present from it): one function serves every
    // length that fits present, and runs where it does not are traced for their own shapes.
    const int64_t total_now = now->ToInt64()[0];
    if (c.has_input(kPastKey) ? total_now > len : total_now != seq)
      c.FailDynamic("present's length follows total_sequence_length");
    c.Assume(fits, "total_sequence_length fits present");
  } else {
    c.Require(fits, c.has_input(kPastKey)
                        ? "total_sequence_length exceeds past_key's " + std::to_string(len) +
                              " rows: ORT's present would be past + new rows, a shape this compiled graph "
                              "cannot have (present keeps past's shape here: bind present to past's buffer, "
                              "or let total_sequence_length fold from the attention mask's shape)"
                        : "total_sequence_length differs from the sequence length (" + std::to_string(seq) +
                              ") without past_key");
  }
  // The shared-buffer layout (present is past's shape): present = past with the new rows at
  // offset_b. When ORT gives past's own buffer as present's, only those rows are written.
  if (c.has_input(kPastKey) && len == c.input(kPastKey).shape(2)) {
    const mx::array offsets = mx::reshape(st.offset, {batch}, s);
    c.UpdateInPlace(1, kPastKey, 2, k, offsets);
    c.UpdateInPlace(2, kPastValue, 2, v, offsets);
  }
  std::vector<mx::array> outs = {out};
  if (c.num_outputs() > 1) outs.push_back(present_k);
  if (c.num_outputs() > 2) outs.push_back(present_v);
  while (outs.size() < c.num_outputs())
    outs.push_back(mx::zeros({0}, out.dtype(), s));  // unused output_qk slot
  return outs;
}

/** A decode step (one query row, the shared-buffer layout) as one primitive where it applies
 *  (attention_gqa_step.h): on MLX's CUDA backend the custom kernel
 *  (ONNXRUNTIME_EP_MLX_DECODE_ATTENTION=kernel), on its CPU device the CPU kernels' step (with
 *  GroupQueryAttention's CPU kernel, unless ONNXRUNTIME_EP_MLX_GQA_CPU_KERNEL=core; not when the
 *  GPU's graphs are forced onto the CPU). nullopt for the composed paths: softcap,
 *  attention_bias, head_sink and smooth_softmax stay with them. */
std::optional<GqaDecodeStep> StepByKernel(const OpContext& c, int heads, int kv_heads) {
  const Node& n = c.node;
  const mx::array& query = c.input(kQuery);
  const bool cuda = DecodeStepByKernelWanted();
  const bool cpu = !FusedGpuPathsOnCpu() && gqa_cpu::StepWanted(c);
  if ((!cuda && !cpu) || !c.has_input(kPastKey) || query.ndim() != 3 || query.shape(1) != 1)
    return std::nullopt;
  if (c.has_input(kBias) || c.has_input(kHeadSink) || n.AttrFloat("softcap", 0.f) > 0.f ||
      n.AttrInt("smooth_softmax", 0) == 1)
    return std::nullopt;
  const mx::array& past_k = c.input(kPastKey);
  if (past_k.ndim() != 4 || PresentLength(c) != past_k.shape(2)) return std::nullopt;
  const int width = c.has_input(kKey) ? query.shape(2) / heads : query.shape(2) / (heads + 2 * kv_heads);
  const float scale_attr = n.AttrFloat("scale", 0.f);
  auto optional = [&](size_t i) {
    return c.has_input(i) ? std::optional<mx::array>(c.input(i)) : std::nullopt;
  };
  const int64_t window = n.AttrInt("local_window_size", -1);
  const GqaDecodeStepInputs in{query,
                               optional(kKey),
                               optional(kValue),
                               past_k,
                               c.input(kPastValue),
                               c.input(kSeqlensK),
                               c.input(kTotalLength),
                               optional(kCos),
                               optional(kSin),
                               optional(kPositionIds),
                               heads,
                               kv_heads,
                               width,
                               n.AttrInt("rotary_interleaved", 0) == 1,
                               window > 0 ? static_cast<int>(window) : 0,
                               scale_attr == 0.f ? 1.f / std::sqrt(static_cast<float>(width)) : scale_attr};
  if (cuda)
    if (std::optional<GqaDecodeStep> step = DecodeStepByKernel(in, c.stream)) return step;
  if (!cpu) return std::nullopt;
  return DecodeStepOnCpu(in, gqa_cpu::PortableLoops(), c.stream);
}

std::vector<mx::array> TranslateGroupQueryAttention(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const int heads = static_cast<int>(n.AttrInt("num_heads", 0)),
            kv_heads = static_cast<int>(n.AttrInt("kv_num_heads", 0));
  if (std::optional<GqaDecodeStep> step = StepByKernel(c, heads, kv_heads)) {
    const Step st = StepOf(c, step->key.shape(0), 1);
    const mx::array past_k = PastRows(c, step->key, kPastKey), past_v = PastRows(c, step->value, kPastValue);
    return Outputs(c, step->out, step->key, step->value, Present(c, step->key, st, past_k),
                   Present(c, step->value, st, past_v), st);
  }
  auto [q, k, v] = SplitQkv(c, heads, kv_heads);
  const mx::Dtype t = q.dtype();
  const int batch = q.shape(0), seq = q.shape(2);
  const Step st = StepOf(c, batch, seq);
  std::optional<mx::array> q_doubled;  // the fused decode core's query rows (attention_gqa_fused.cc)
  if (n.AttrInt("do_rotary", 0) == 1) {
    const mx::array pos = Positions(c, st, batch, seq);  // Q's and K's, built once
    if (seq == 1 && UseFusedGpuPaths()) {
      // One rotation writes both rows; the other paths read row 0 of it.
      q_doubled = Rotate(c, q, pos, 2);
      q = mx::slice(*q_doubled, {0, 0, 0, 0}, {batch, q.shape(1), 1, q.shape(3)}, s);
      k = Rotate(c, k, pos);
    } else if (std::optional<GqaRotatedQkv> qkv = RotateByKernel(c, pos, heads, kv_heads, q.shape(3))) {
      q = qkv->q;
      k = qkv->k;
      v = qkv->v;
    } else {
      q = Rotate(c, q, pos);
      k = Rotate(c, k, pos);
    }
  }
  AttendedKv kv{std::nullopt, std::nullopt, mx::astype(k, mx::float32, s), mx::astype(v, mx::float32, s)};
  mx::array present_k = k, present_v = v;
  std::optional<mx::array> past_rows_k, past_rows_v;
  if (c.has_input(kPastKey)) {
    const mx::array past_k = PastRows(c, k, kPastKey), past_v = PastRows(c, v, kPastValue);
    past_rows_k = past_k;
    past_rows_v = past_v;
    kv.past_k = mx::astype(past_k, mx::float32, s);
    kv.past_v = mx::astype(past_v, mx::float32, s);
    present_k = Present(c, k, st, past_k);
    present_v = Present(c, v, st, past_v);
  }
  const int len = present_k.shape(2);
  // On GPUs the fused SDPA where it applies (attention_gqa_fused.cc); on MLX's CPU device a kernel
  // that visits the attended keys only (attention_gqa_cpu.h). The unused float32 copies above are
  // then never evaluated.
  auto optional = [&](size_t i) {
    return c.has_input(i) ? std::optional<mx::array>(c.input(i)) : std::nullopt;
  };
  // The MLX-composed cores read no past on a first prompt the trace knows (the CPU kernel keeps
  // its own test, from seqlens_k and total_sequence_length, at run time).
  const bool first_known = c.has_input(kPastKey) && KnownFirstPrompt(c, seq);
  if (first_known) kv.past_k = kv.past_v = std::nullopt;
  std::optional<mx::array> fused =
      AttendGqaFused(c, {q, k, v, first_known ? std::nullopt : past_rows_k,
                         first_known ? std::nullopt : past_rows_v, st.total, st.offset, len, q_doubled});
  if (!fused && gqa_cpu::Wanted(c))
    fused = gqa_cpu::Attend(c,
                            {q, k, v, past_rows_k, past_rows_v, c.input(kSeqlensK), c.input(kTotalLength),
                             optional(kBias), optional(kHeadSink)},
                            len);
  mx::array y = fused ? *fused : Attend(c, mx::astype(q, mx::float32, s), kv, st, len);
  return Outputs(c, mx::astype(MergeHeads(y, s), t, s), k, v, present_k, present_v, st);
}

}  // namespace

void RegisterGroupQueryAttentionOps(OpRegistry& r) {
  r.Add(
      {"com.microsoft", "GroupQueryAttention", 1, 1, ClaimGroupQueryAttention, TranslateGroupQueryAttention});
}

}  // namespace mlx_ep
