// The pkg.onnax AttentionVJP function contract (shared by attention_vjp.cc, which parses the op
// type, claims and dispatches, and attention_vjp_pullback.cc, which computes the gradients).
//
// Op type: AttentionVJP_r{3|4}_q{Hq}_k{Hk}_d{D}_s{scale: 8 hex digits of its f32 bits}_c{0|1}_
// o{requested outputs, strictly increasing digits, 0 dQ 1 dK 2 dV}_m{0|1|2}_{16 hex digits}, or
// AttentionVJPRecompute_ with the same fields (no Y input: the forward is recomputed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ops/op.h"

namespace mlx_ep::attention_vjp {

/** What the mask input means: ignored, true-attends booleans, or an additive float bias. */
enum class MaskKind { kNone = 0, kBool = 1, kAdditive = 2 };

/** The configuration an op type encodes. */
struct Contract {
  bool recompute = false;  ///< AttentionVJPRecompute_: inputs Q K V G Mask (no Y)
  int rank = 0;            ///< 3: [B, S, H*D]; 4: [B, H, S, D]
  int q_heads = 0;
  int kv_heads = 0;  ///< q_heads is a multiple of it (grouped-query attention)
  int head_dim = 0;
  float scale = 0.f;
  bool causal = false;       ///< ONNX's top-left alignment: query i attends keys j <= i
  std::vector<int> outputs;  ///< the gradients produced, in output order (0 dQ, 1 dK, 2 dV)
  MaskKind mask = MaskKind::kNone;

  /** Index of the G (output cotangent) input; Y, when present, is input 3. */
  size_t cotangent_input() const { return recompute ? 3 : 4; }
  /** Index of the Mask input (the last one). */
  size_t mask_input() const { return recompute ? 4 : 5; }
  size_t num_inputs() const { return recompute ? 5 : 6; }
};

/** Parses an op type of the family; nullopt with `*reason` set when it is malformed. */
std::optional<Contract> ParseContract(const std::string& op_type, std::string* reason);

/** A pullback's inputs, all in the [B, H, S, D] layout and float32. */
struct HeadTensors {
  mx::array q, k, v, g;
  std::optional<mx::array> y;     ///< the forward output (absent for the recompute form)
  std::optional<mx::array> mask;  ///< the mask input, broadcastable to [B, Hq, Sq, <=Sk]
};

/** The attention output Y [B, Hq, Sq, D] through MLX's fused SDPA (zero on fully masked rows). */
mx::array FusedForward(const Contract& c, const HeadTensors& t, mx::Stream s);

/** {dQ, dK, dV} through mx::vjp of MLX's fused SDPA (the recompute form's default path). */
std::vector<mx::array> FusedPullback(const Contract& c, const HeadTensors& t, mx::Stream s);

/** {dQ, dK, dV} from the score matrix, recomputed from Q and K `query_block` query rows at a
 *  time (the whole sequence at once when query_block >= Sq). Needs t.y. */
std::vector<mx::array> GemmPullback(const Contract& c, const HeadTensors& t, int query_block, mx::Stream s);

// The tiled pullback as MLX custom CUDA kernels (attention_vjp_cuda.cc).
/** True when the kernels' launch (one warp per query row and per key row) fits an int grid. */
bool KernelPullbackFits(const HeadTensors& t);
/** Builds and checks the kernels once per process and device type: "" when they work, else why. */
std::string KernelBuildError(mx::Stream s);
/** {dQ, dK, dV} through the kernels, never materialising the score matrix; the recompute form
 *  (no t.y) recomputes Y inside them. */
std::vector<mx::array> KernelPullback(const Contract& c, const HeadTensors& t, mx::Stream s);

}  // namespace mlx_ep::attention_vjp
