// Op family: the pkg.onnax AttentionVJP contract (opset 1), the attention pullbacks that the onnax
// transformation library writes into training graphs. One registry entry matches every op type
// that starts with "AttentionVJP" (the op type encodes the configuration, see
// attention_vjp_internal.h); a malformed name is declined with the reason.
//
//  - Inputs Q, K, V, Y (the forward output; absent in the Recompute form), G (Y's cotangent),
//    Mask; outputs the requested gradients among dQ, dK, dV, each shaped like its primal.
//  - Rank 3 tensors [B, S, H*D] are split into heads ([B, H, S, D]) and the gradients merged back.
//  - The mask broadcasts to [B, Hq, Sq, Sk]; its last axis may be shorter than Sk (padded with
//    false / -inf). With mask kind 0 the Mask input is ignored. A fully masked query row has zero
//    output and zero gradient; an empty batch or sequence gives zero gradients.
//  - AttentionVJPRecompute_ runs mx::vjp of MLX's fused SDPA. AttentionVJP_ recomputes the score
//    matrix with matmuls while it fits ONNXRUNTIME_EP_MLX_ATTENTION_VJP_DENSE_LIMIT_BYTES (float32
//    bytes of B * Hq * Sq * Sk, default 64 MiB), and query block by query block beyond it. When the
//    variable is set, it also bounds the Recompute form: over budget, Y is recomputed through fused
//    SDPA and the blocked pullback runs. With ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL=1, over
//    budget on the GPU of a CUDA MLX, the tiled pullback runs as custom CUDA kernels instead
//    (attention_vjp_cuda.cc; Y recomputed inside them for the Recompute form): opt-in, they are
//    exact but measured slower than the composed blocks on the H200.
//  - float32, float16 and bfloat16 (Q, K, V, Y, G of one type; an additive mask of that type or
//    float32); float16 / bfloat16 compute in float32 and round the gradients once.
//  - Declined: malformed op types, interface mismatches (input / output counts), other types,
//    tensors whose rank, head count or width does not match the op type, masks of rank outside
//    1..4, of the wrong type (bool for kinds 0 and 1, float for kind 2) or whose static shape does
//    not broadcast to the scores.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/env.h"
#include "common/log.h"
#include "ops/attention_vjp_internal.h"
#include "ops/claim_util.h"
#include "ops/registry.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace attention_vjp {
namespace {

constexpr const char* kRecomputePrefix = "AttentionVJPRecompute_";
constexpr const char* kPrefix = "AttentionVJP_";
constexpr uint64_t kDefaultDenseLimitBytes = 64ull << 20;
/** The blocked pullback keeps its graph small: at most this many query blocks. */
constexpr int kMaxQueryBlocks = 64;

std::vector<std::string> SplitFields(const std::string& text) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t end; (end = text.find('_', start)) != std::string::npos; start = end + 1)
    fields.push_back(text.substr(start, end - start));
  fields.push_back(text.substr(start));
  return fields;
}

/** The decimal integer after `tag` in `field` (digits only, fits int32), or nullopt. */
std::optional<int> Integer(const std::string& field, char tag) {
  if (field.size() < 2 || field.size() > 11 || field[0] != tag) return std::nullopt;
  int64_t value = 0;
  for (size_t i = 1; i < field.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(field[i]))) return std::nullopt;
    value = value * 10 + (field[i] - '0');
  }
  if (value > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int>(value);
}

bool IsHex(const std::string& text, size_t from) {
  for (size_t i = from; i < text.size(); ++i)
    if (!std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  return from < text.size();
}

/** The f32 whose bits are the 8 hex digits after 's'. */
std::optional<float> Scale(const std::string& field) {
  if (field.size() != 9 || field[0] != 's' || !IsHex(field, 1)) return std::nullopt;
  const uint32_t bits = static_cast<uint32_t>(std::stoul(field.substr(1), nullptr, 16));
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return scale;
}

/** The digits after 'o': non-empty, each 0..2, strictly increasing. */
std::optional<std::vector<int>> Outputs(const std::string& field) {
  if (field.size() < 2 || field[0] != 'o') return std::nullopt;
  std::vector<int> outputs;
  for (size_t i = 1; i < field.size(); ++i) {
    const int o = field[i] - '0';
    if (o < 0 || o > 2 || (!outputs.empty() && o <= outputs.back())) return std::nullopt;
    outputs.push_back(o);
  }
  return outputs;
}

}  // namespace

std::optional<Contract> ParseContract(const std::string& op_type, std::string* reason) {
  auto fail = [&](const std::string& why) {
    *reason = "unsupported AttentionVJP function contract " + op_type + ": " + why;
    return std::nullopt;
  };
  Contract c;
  c.recompute = op_type.rfind(kRecomputePrefix, 0) == 0;
  const std::string prefix = c.recompute ? kRecomputePrefix : kPrefix;
  if (!c.recompute && op_type.rfind(kPrefix, 0) != 0)
    return fail("the op type must start with AttentionVJP_ or AttentionVJPRecompute_");
  const std::vector<std::string> f = SplitFields(op_type.substr(prefix.size()));
  if (f.size() != 9) return fail("expected 9 fields r_q_k_d_s_c_o_m_<id>, found " + std::to_string(f.size()));
  const auto rank = Integer(f[0], 'r'), hq = Integer(f[1], 'q'), hk = Integer(f[2], 'k');
  const auto d = Integer(f[3], 'd'), causal = Integer(f[5], 'c'), mask = Integer(f[7], 'm');
  const auto scale = Scale(f[4]);
  const auto outputs = Outputs(f[6]);
  if (!rank || (*rank != 3 && *rank != 4)) return fail("rank field must be r3 or r4");
  if (!hq || !hk || *hq <= 0 || *hk <= 0 || *hq % *hk != 0)
    return fail("head counts must be positive with q a multiple of k");
  const int d_min = c.recompute ? 32 : 8;
  if (!d || *d < d_min || *d > 256 || *d % 8 != 0)
    return fail("head width must be a multiple of 8 in " + std::to_string(d_min) + "..256");
  if (static_cast<int64_t>(*hq) * *d > std::numeric_limits<int32_t>::max())
    return fail("heads times width overflows");
  if (!scale || !std::isfinite(*scale) || *scale <= 0.f)
    return fail("scale must be 8 hex digits of a finite positive float32");
  if (!causal || *causal > 1) return fail("causal field must be c0 or c1");
  if (!outputs) return fail("outputs must be strictly increasing digits among 0 (dQ), 1 (dK), 2 (dV)");
  if (!mask || *mask > 2) return fail("mask field must be m0, m1 or m2");
  if (f[8].size() != 16 || !IsHex(f[8], 0)) return fail("the last field must be 16 hex digits");
  c.rank = *rank;
  c.q_heads = *hq;
  c.kv_heads = *hk;
  c.head_dim = *d;
  c.scale = *scale;
  c.causal = *causal == 1;
  c.outputs = *outputs;
  c.mask = static_cast<MaskKind>(*mask);
  return c;
}

namespace {

/** Heads of tensor input i: kv heads for K and V, query heads for the others. */
int HeadsOf(const Contract& c, size_t input) { return input == 1 || input == 2 ? c.kv_heads : c.q_heads; }

constexpr std::initializer_list<ElemType> kTensorTypes = {ElemType::kFloat, ElemType::kFloat16,
                                                          ElemType::kBFloat16};

std::string CheckTensorInput(const Contract& c, const NodeView& v, size_t i) {
  const std::string what = "AttentionVJP input " + std::to_string(i);
  if (!v.has_input(i)) return what + " is missing";
  if (!IsOneOf(v.input_type(i), kTensorTypes))
    return what + " is " + ElemName(v.input_type(i)) + ", not float32, float16 or bfloat16";
  if (v.input_type(i) != v.input_type(0)) return what + " differs in type from Q";
  const auto shape = v.input_shape(i);
  if (!shape || static_cast<int>(shape->size()) != c.rank)
    return what + " does not have the op type's rank " + std::to_string(c.rank);
  const int heads = HeadsOf(c, i);
  const int64_t width = c.rank == 3 ? static_cast<int64_t>(heads) * c.head_dim : c.head_dim;
  if (shape->back() != width) return what + " has not the static width " + std::to_string(width);
  if (c.rank == 4 && (*shape)[1] != heads)
    return what + " has not the static head count " + std::to_string(heads);
  return "";
}

/** Declines a mask whose static dims cannot broadcast to [B, Hq, Sq, Sk] (its last axis may be
 *  shorter than Sk); unknown dims are checked when tracing. */
Claim ClaimMaskShape(const Contract& c, const NodeView& v) {
  const auto q = v.input_shape(0), k = v.input_shape(1), mask = v.input_shape(c.mask_input());
  const size_t seq = c.rank == 3 ? 1 : 2;
  const std::vector<int64_t> scores = {(*q)[0], c.q_heads, (*q)[seq], (*k)[seq]};
  for (size_t axis = 1; axis <= mask->size(); ++axis) {
    const int64_t size = (*mask)[mask->size() - axis], target = scores[4 - axis];
    if (size < 0 || target < 0 || size == 1 || size == target || (axis == 1 && size < target)) continue;
    return Claim::No("AttentionVJP mask dim " + std::to_string(size) + " does not broadcast to " +
                     std::to_string(target) + " in [B, Hq, Sq, Sk]");
  }
  return Claim::Yes();
}

Claim ClaimAttentionVjp(const NodeView& v) {
  std::string reason;
  const auto c = ParseContract(v.node().op_type, &reason);
  if (!c) return Claim::No(reason);
  // Without a mask kind, the (ignored) Mask input may be left out entirely.
  const bool inputs_match = v.num_inputs() == c->num_inputs() ||
                            (c->mask == MaskKind::kNone && v.num_inputs() + 1 == c->num_inputs());
  if (!inputs_match || v.num_outputs() != c->outputs.size())
    return Claim::No("AttentionVJP interface mismatch: expected " + std::to_string(c->num_inputs()) +
                     " inputs and " + std::to_string(c->outputs.size()) + " outputs");
  for (size_t i = 0; i < c->mask_input(); ++i)
    if (auto why = CheckTensorInput(*c, v, i); !why.empty()) return Claim::No(why);
  const ElemType t = v.input_type(0);
  for (size_t i = 0; i < v.num_outputs(); ++i)
    if (v.has_output(i) && v.output_type(i) != t && v.output_type(i) != ElemType::kUndefined)
      return Claim::No("AttentionVJP output " + std::to_string(i) + " differs in type from Q");
  const size_t m = c->mask_input();
  if (!v.has_input(m))
    return c->mask == MaskKind::kNone ? Claim::Yes() : Claim::No("AttentionVJP mask tensor required");
  const auto mask_rank = v.input_rank(m);
  if (!mask_rank || *mask_rank < 1 || *mask_rank > 4) return Claim::No("AttentionVJP mask rank must be 1..4");
  const ElemType mask_type = v.input_type(m);
  const bool additive = c->mask == MaskKind::kAdditive;
  if (additive ? mask_type != ElemType::kFloat && mask_type != t : mask_type != ElemType::kBool)
    return Claim::No("AttentionVJP mask type mismatch: mask kind " +
                     std::to_string(static_cast<int>(c->mask)) + " takes " +
                     (additive ? "float32 or Q's type" : "bool") + ", got " + ElemName(mask_type));
  if (c->mask != MaskKind::kNone) return ClaimMaskShape(*c, v);
  return Claim::Yes();
}

/** Input i as [B, H, S, D] float32. */
mx::array ToHeads(const OpContext& c, const Contract& k, size_t i) {
  const mx::array x = mx::astype(c.input(i), mx::float32, c.stream);
  const int heads = HeadsOf(k, i);
  if (static_cast<int>(x.ndim()) != k.rank)
    c.Fail("input " + std::to_string(i) + " has rank " + std::to_string(x.ndim()));
  if (k.rank == 4) {
    if (x.shape(1) != heads || x.shape(3) != k.head_dim)
      c.Fail("input " + std::to_string(i) + " is not [B, H, S, D]");
    return x;
  }
  if (x.shape(2) != heads * k.head_dim) c.Fail("input " + std::to_string(i) + " is not [B, S, H*D]");
  const mx::array split = mx::reshape(x, {x.shape(0), x.shape(1), heads, k.head_dim}, c.stream);
  return mx::transpose(split, {0, 2, 1, 3}, c.stream);
}

/** Fails unless the mask broadcasts to [B, Hq, Sq, Sk] (its last axis may be shorter than Sk). */
void CheckMask(const OpContext& c, const mx::array& mask, const mx::Shape& scores) {
  if (mask.ndim() < 1 || mask.ndim() > 4) c.Fail("the mask must have rank 1..4");
  for (int axis = 1; axis <= static_cast<int>(mask.ndim()); ++axis) {
    const int size = mask.shape(-axis), target = scores[4 - axis];
    if (size != 1 && size != target && !(axis == 1 && size < target))
      c.Fail("the mask does not broadcast to [B, Hq, Sq, Sk]");
  }
}

/** Bytes of the float32 score matrix [B, Hq, Sq, Sk], saturating. */
uint64_t ScoreBytes(const mx::Shape& scores) {
  uint64_t bytes = 4;
  for (int dim : scores) {
    if (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(dim))
      return std::numeric_limits<uint64_t>::max();
    bytes *= static_cast<uint64_t>(dim);
  }
  return bytes;
}

/** The score budget set in the environment, or nullopt (unset or not a number). */
std::optional<uint64_t> DenseLimitFromEnv() {
  const std::string text = EnvString(env::kAttentionVjpDenseLimit);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19)
    return std::nullopt;
  return std::stoull(text);
}

/** True when the over-budget pullback runs as the CUDA kernels: the stream is on the GPU of a
 *  CUDA MLX and ONNXRUNTIME_EP_MLX_ATTENTION_VJP_KERNEL is "1" ("force": on any device, for
 *  testing the failure path). Opt-in: on the H200 the kernels took 1.45-1.8x the composed query
 *  blocks' time (bench/bench_attention_vjp.py, docs/performance.md; no shared-memory tiling
 *  yet). Fails the node (naming it) when the kernels do not build, rather than the partition's
 *  evaluation. */
bool UseKernel(const OpContext& c, const HeadTensors& t, const mx::Shape& scores) {
  const std::string mode = EnvString(env::kAttentionVjpKernel, "0");
  const bool wanted = mode == "force" || ((mode == "1" || mode == "on") && CudaKernelsAvailable(c.stream));
  if (!wanted || !KernelPullbackFits(t)) return false;
  if (const std::string error = KernelBuildError(c.stream); !error.empty())
    c.Fail(error + " (unset " + env::kAttentionVjpKernel + " to run composed MLX ops instead)");
  if (EnvFlag(env::kVerbose))
    LogLine("AttentionVJP " + c.node.Label() + ": tiled pullback through the CUDA kernels, scores [" +
            std::to_string(scores[0]) + ", " + std::to_string(scores[1]) + ", " + std::to_string(scores[2]) +
            ", " + std::to_string(scores[3]) + "]");
  return true;
}

/** The gradients {dQ, dK, dV} in the [B, H, S, D] layout. */
std::vector<mx::array> Pullback(const OpContext& c, const Contract& k, HeadTensors& t) {
  const mx::Shape scores = {t.q.shape(0), t.q.shape(1), t.q.shape(2), t.k.shape(2)};
  const std::optional<uint64_t> limit = DenseLimitFromEnv();
  const uint64_t budget = limit.value_or(kDefaultDenseLimitBytes);
  const uint64_t bytes = ScoreBytes(scores);
  if (k.recompute && (!limit || bytes <= budget)) return FusedPullback(k, t, c.stream);
  // Over budget: the CUDA kernels where they run (they recompute Y themselves), else query blocks.
  if (bytes > budget && UseKernel(c, t, scores)) return KernelPullback(k, t, c.stream);
  if (k.recompute) t.y = FusedForward(k, t, c.stream);
  if (bytes <= budget) return GemmPullback(k, t, scores[2], c.stream);
  const uint64_t row_bytes = bytes / static_cast<uint64_t>(scores[2]);
  int block = static_cast<int>(std::min<uint64_t>(budget / row_bytes, static_cast<uint64_t>(scores[2])));
  block = std::max({block, 1, (scores[2] + kMaxQueryBlocks - 1) / kMaxQueryBlocks});
  return GemmPullback(k, t, block, c.stream);
}

std::vector<mx::array> TranslateAttentionVjp(const OpContext& c) {
  std::string reason;
  const auto k = ParseContract(c.node.op_type, &reason);
  if (!k) c.Fail(reason);
  HeadTensors t{ToHeads(c, *k, 0), ToHeads(c, *k, 1), ToHeads(c, *k, 2), ToHeads(c, *k, k->cotangent_input()),
                std::nullopt,      std::nullopt};
  if (!k->recompute) t.y = ToHeads(c, *k, 3);
  const int b = t.q.shape(0), query_len = t.q.shape(2), key_len = t.k.shape(2);
  if (t.k.shape(0) != b || t.v.shape() != t.k.shape() || t.g.shape() != t.q.shape() ||
      (t.y && t.y->shape() != t.q.shape()))
    c.Fail("Q, K, V, Y and G shapes do not agree");
  if (k->mask != MaskKind::kNone) {
    if (!c.has_input(k->mask_input())) c.Fail("the mask input is missing");
    t.mask = c.input(k->mask_input());
    if (k->mask == MaskKind::kAdditive) t.mask = mx::astype(*t.mask, mx::float32, c.stream);
    CheckMask(c, *t.mask, {b, k->q_heads, query_len, key_len});
  }
  std::vector<mx::array> grads;
  if (b == 0 || query_len == 0 || key_len == 0) {
    for (size_t i = 0; i < 3; ++i) grads.push_back(mx::zeros(c.input(i).shape(), mx::float32, c.stream));
  } else {
    grads = Pullback(c, *k, t);
    if (k->rank == 3)
      for (size_t i = 0; i < 3; ++i)
        grads[i] = mx::reshape(mx::transpose(grads[i], {0, 2, 1, 3}, c.stream), c.input(i).shape(), c.stream);
  }
  std::vector<mx::array> outs;
  // float16 / bfloat16 compute in float32 and round once.
  for (int o : k->outputs) outs.push_back(mx::astype(grads[o], c.input(0).dtype(), c.stream));
  return outs;
}

}  // namespace
}  // namespace attention_vjp

void RegisterAttentionVjpOps(OpRegistry& r) {
  // The trailing '*' makes the entry match every op type with that prefix (registry.h).
  r.Add({"pkg.onnax", "AttentionVJP*", 1, 1, attention_vjp::ClaimAttentionVjp,
         attention_vjp::TranslateAttentionVjp});
}

}  // namespace mlx_ep
