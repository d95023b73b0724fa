// Helpers shared by the recurrent op family's files (recurrent.cc: RNN, attributes, inputs, the time
// loop; recurrent_cells.cc: the LSTM and GRU cells).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace recurrent {

enum class Cell { kRnn, kGru, kLstm };

/** One activation function with the alpha/beta it uses (name in lower case, as ORT normalizes it). */
struct Activation {
  std::string name;
  float alpha = 0.f;
  float beta = 0.f;
};

/** The attributes of a recurrent node, checked. */
struct Config {
  Cell cell = Cell::kRnn;
  int num_directions = 1;
  bool reverse = false;  ///< direction == "reverse" (a bidirectional node's second direction is reverse too)
  int hidden_size = 0;
  std::optional<float> clip;
  bool batch_major = false;  ///< layout == 1
  /** Per direction, the cell's functions in ONNX order: RNN (f), GRU (f, g), LSTM (f, g, h). */
  std::vector<std::vector<Activation>> activations;
  bool input_forget = false;         ///< LSTM
  bool linear_before_reset = false;  ///< GRU
};

/** Reads and checks the attributes; on failure returns nullopt and sets `reason`. */
std::optional<Config> ParseConfig(const Node& node, Cell cell, std::string* reason);

/** The inputs in time-major layout ([seq, batch, ...]), converted to float32. */
struct Inputs {
  Inputs(mx::array x, mx::array w, mx::array r) : x(std::move(x)), w(std::move(w)), r(std::move(r)) {}
  mx::array x;                         ///< [S, B, I]
  mx::array w;                         ///< [D, G*H, I]
  mx::array r;                         ///< [D, G*H, H]
  std::optional<mx::array> bias;       ///< [D, 2*G*H]
  std::optional<mx::array> lens;       ///< [B, 1] int32
  std::optional<mx::array> h0;         ///< [D, B, H]
  std::optional<mx::array> c0;         ///< [D, B, H] (LSTM)
  std::optional<mx::array> peepholes;  ///< [D, 3*H] (LSTM)
  int seq = 0, batch = 0, input_size = 0;
};

/** Reads and checks the node's inputs against `cfg` (c.Fail on a shape mismatch). */
Inputs ReadInputs(const OpContext& c, const Config& cfg);

/** f(x) in float32, with ORT's formulas. */
mx::array Activate(const Activation& a, const mx::array& x, mx::Stream s);

/** x clipped to [-clip, clip] when the node has a clip attribute. */
mx::array Clip(const Config& cfg, const mx::array& x, mx::Stream s);

/** Direction d of a [D, ...] array (W, R, B, P, initial states), as [...]. */
mx::array OfDirection(const mx::array& a, int d, mx::Stream s);

/** a @ b for 2-D operands; zeros, without mx::matmul, when a dimension is 0 (K = 0 included). */
mx::array MatmulOrZeros(const mx::array& a, const mx::array& b, mx::Stream s);

/** Direction d of W or R ([D, G*H, K]), transposed: [K, G*H]. */
mx::array Weights(const mx::array& w, int d, mx::Stream s);

/** Direction d's Wb and Rb ([G*H] each) when the node has a bias. */
std::optional<std::pair<mx::array, mx::array>> BiasParts(const Inputs& in, int d, mx::Stream s);

/** X·W[d]^T for every step at once plus `folded` biases ([G*H], may be absent): [S, B, G*H]. */
mx::array InputProjection(const Inputs& in, int d, const std::optional<mx::array>& folded, mx::Stream s);

/** a[t] for each t of a's first axis (InputProjection's steps: one [B, G*H] array each). One slice
 *  per step rather than one mx::split: a split's outputs each list all their siblings, which costs
 *  O(S^2) when tracing and evaluating. */
std::vector<mx::array> SplitSteps(const mx::array& a, mx::Stream s);

/** The state of one direction: {h} or {h, c}; `state[0]` is the step's output. */
using State = std::vector<mx::array>;
/** One time step at time index t (0..S-1): the new state from the previous one. */
using StepFn = std::function<State(int t, const State& prev)>;

/** A direction's outputs: h at each time index (zero past a sequence's length) and the final state. */
struct DirectionResult {
  std::vector<mx::array> ys;
  State last;
  std::optional<mx::array> y_all;  ///< instead of ys: every step's h at once, [S, B, H]
};

/** Runs `step` over time (backwards when `reverse`) from `init`. With sequence lengths a batch
 *  entry's state stops changing past its length and its outputs there are 0; the final state of an
 *  empty sequence is 0 (as ORT's kernels give). */
DirectionResult RunDirection(const Inputs& in, bool reverse, State init, const StepFn& step, mx::Stream s);

/** Direction d's initial state (the given one or zeros), [B, H] each. */
State InitialState(const Config& cfg, const Inputs& in, int d, mx::Stream s);

/** Direction d of the node as one primitive of the EP's on MLX's CPU stream (recurrent_cpu.cc):
 *  the time loop in C++ over InputProjection `xw` ([S, B, G*H], with the foldable biases) and, for
 *  a GRU with linear_before_reset, `rbh` (R's h-gate bias, [H]); nullopt elsewhere (other devices,
 *  an empty sequence or batch) or with ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL=0. */
std::optional<DirectionResult> DirectionOnCpu(const Config& cfg, const Inputs& in, int d, const mx::array& xw,
                                              const std::optional<mx::array>& rbh, mx::Stream s);

/** Y, Y_h (and Y_c) from the directions' results, in the node's layout and dtype; one array per
 *  output slot of the node. */
std::vector<mx::array> AssembleOutputs(const OpContext& c, const Config& cfg, const Inputs& in,
                                       const std::vector<DirectionResult>& dirs);

/** Claim shared by LSTM, GRU and RNN. */
Claim ClaimRecurrent(const NodeView& v, Cell cell);

}  // namespace recurrent

std::vector<mx::array> TranslateLstm(const OpContext& c);  // recurrent_cells.cc
std::vector<mx::array> TranslateGru(const OpContext& c);   // recurrent_cells.cc

}  // namespace mlx_ep
