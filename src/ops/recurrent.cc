// Op family: recurrent layers RNN, GRU, LSTM (opsets 7-13 and 14-22; 14 added `layout`).
//
// Semantics follow ORT's CPU kernels (rnn.cc, deep_cpu_gru.cc, deep_cpu_lstm.cc), which is what
// the parity tests measure against:
//  - Each node becomes one unrolled MLX computation: X·W^T (+ the biases that can be folded) is one
//    matmul over all steps, then every step adds h·R^T and applies the gates. The sequence length
//    is static when tracing, so the loop is unrolled in C++ (MLX has no loop primitive).
//  - sequence_lens is runtime data and is handled with masks, never read on the host: a batch
//    entry's state stops changing at its length, its Y rows there are 0, and the reverse direction
//    starts at the entry's own last valid step. An empty sequence's Y_h/Y_c are 0, like ORT's.
//    Out-of-range lengths, which ORT rejects, are declined when sequence_lens is a constant; at
//    run time they act as clamped to [0, seq_length] and a runtime check fails the run after
//    evaluation (OpContext::Require), as ORT does.
//  - layout=1 (batch-major X, initial states, Y, Y_h, Y_c) is computed by transposing at the
//    boundaries. ORT's CPU kernels refuse layout=1, so there it is measured against ORT on the
//    transposed layout-0 node.
//  - Activations take alpha/beta the way ORT (1.31, measured) does: activation_alpha/_beta are
//    consumed in order, only by the functions that take them, with ORT's defaults (LeakyRelu 0.01,
//    HardSigmoid 0.2/0.5, Elu 1, which are ONNX's too). Where ORT's default (0) differs from ONNX's
//    (Affine and ThresholdedRelu alpha; ScaledTanh has none) the node is declined. Names are
//    case-insensitive for LSTM/GRU (as ORT), spelled as ONNX does for RNN.
//  - float16/bfloat16 compute in float32 and round once (ORT runs its float32 kernel between casts
//    for float16). float64 is declined: ORT's CPU kernels have no float64 implementation.
#include <algorithm>
#include <cctype>
#include <map>

#include "ops/recurrent_internal.h"
#include "ops/unary_internal.h"

namespace mlx_ep {
namespace recurrent {
namespace {

int GatesOf(Cell cell) { return cell == Cell::kLstm ? 4 : cell == Cell::kGru ? 3 : 1; }
int FunctionsOf(Cell cell) { return cell == Cell::kLstm ? 3 : cell == Cell::kGru ? 2 : 1; }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

/** Which of alpha/beta an activation takes (ORT's rnn_helpers.cc). */
struct ArgUse {
  bool alpha;
  bool beta;
};
const std::map<std::string, ArgUse>& ArgUses() {
  static const std::map<std::string, ArgUse> uses = {
      {"affine", {true, true}},           {"relu", {false, false}},      {"leakyrelu", {true, false}},
      {"thresholdedrelu", {true, false}}, {"tanh", {false, false}},      {"scaledtanh", {true, true}},
      {"sigmoid", {false, false}},        {"hardsigmoid", {true, true}}, {"elu", {true, false}},
      {"softsign", {false, false}},       {"softplus", {false, false}}};
  return uses;
}

/** ORT's LSTM/GRU default alpha/beta where it agrees with the ONNX activation's own default. */
std::optional<float> AgreedDefault(const std::string& name, bool alpha) {
  if (name == "leakyrelu" && alpha) return 0.01f;
  if (name == "hardsigmoid") return alpha ? 0.2f : 0.5f;
  if (name == "elu" && alpha) return 1.0f;
  if (name == "affine" && !alpha) return 0.0f;
  return std::nullopt;
}

std::vector<std::string> AttrStrings(const Node& n, const char* name) {
  const Attribute* a = n.Attr(name);
  return a ? a->strings : std::vector<std::string>{};
}

std::vector<float> AttrFloats(const Node& n, const char* name) {
  const Attribute* a = n.Attr(name);
  return a ? a->floats : std::vector<float>{};
}

// Names: ONNX's spelling for RNN (ORT's RNN kernel rejects others), case-insensitive for LSTM/GRU
// (ORT lower-cases them). alpha/beta are consumed in order by the functions that take them.
bool ParseActivations(const Node& n, Config* cfg, std::string* reason) {
  static const std::vector<std::string> kOnnxNames = {
      "Relu",       "Tanh",        "Sigmoid", "Affine",   "LeakyRelu", "ThresholdedRelu",
      "ScaledTanh", "HardSigmoid", "Elu",     "Softsign", "Softplus"};
  const bool rnn = cfg->cell == Cell::kRnn;
  const size_t k = FunctionsOf(cfg->cell), d_count = cfg->num_directions;
  std::vector<std::string> names = AttrStrings(n, "activations");
  if (names.empty()) {
    if (rnn) {
      names = {"Tanh", "Tanh"};  // ONNX's default
    } else {
      const std::vector<std::string> per_direction = {"Sigmoid", "Tanh", "Tanh"};  // f, g, h
      for (size_t d = 0; d < d_count; ++d)
        names.insert(names.end(), per_direction.begin(), per_direction.begin() + k);
    }
  }
  if (rnn && names.size() == 2 && d_count == 1) names.resize(1);  // ORT takes the first of RNN's two defaults
  if (names.size() != k * d_count) {
    *reason = "activations lists " + std::to_string(names.size()) + " functions, expected " +
              std::to_string(k * d_count);
    return false;
  }
  const std::vector<float> alphas = AttrFloats(n, "activation_alpha"),
                           betas = AttrFloats(n, "activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  auto take = [&](const std::string& name, bool alpha, float* out) {
    const std::vector<float>& list = alpha ? alphas : betas;
    size_t& next = alpha ? next_alpha : next_beta;
    if (next < list.size()) {
      *out = list[next++];
      return true;
    }
    const std::optional<float> fallback = AgreedDefault(name, alpha);
    if (!fallback) {
      *reason = "activation " + name + " without its activation_" + (alpha ? "alpha" : "beta") +
                ": ORT's default (0) differs from ONNX's";
      return false;
    }
    *out = *fallback;
    return true;
  };
  cfg->activations.assign(d_count, {});
  for (size_t i = 0; i < names.size(); ++i) {
    Activation act{Lower(names[i])};
    auto use = ArgUses().find(act.name);
    if (use == ArgUses().end() ||
        (rnn && std::find(kOnnxNames.begin(), kOnnxNames.end(), names[i]) == kOnnxNames.end())) {
      *reason = "activation " + names[i] + " not supported";
      return false;
    }
    if (use->second.alpha && !take(act.name, true, &act.alpha)) return false;
    if (use->second.beta && !take(act.name, false, &act.beta)) return false;
    cfg->activations[i / k].push_back(act);
  }
  return true;
}

void ExpectShape(const OpContext& c, const char* what, const mx::array& a, const mx::Shape& expected) {
  if (a.shape() == expected) return;
  auto str = [](const mx::Shape& sh) {
    std::string out = "[";
    for (size_t i = 0; i < sh.size(); ++i) {
      if (i) out += ',';
      out += std::to_string(sh[i]);
    }
    return out + "]";
  };
  c.Fail(std::string(what) + " has shape " + str(a.shape()) + ", expected " + str(expected));
}

}  // namespace

/** a[t] for each t of a's first axis. One slice per step rather than one mx::split: a split's
 *  outputs each list all their siblings, which costs O(S^2) when tracing and evaluating. */
std::vector<mx::array> SplitSteps(const mx::array& a, mx::Stream s) {
  mx::Shape start(a.ndim(), 0), stop = a.shape();
  const mx::Shape step_shape(a.shape().begin() + 1, a.shape().end());
  std::vector<mx::array> steps;
  for (int t = 0; t < a.shape(0); ++t) {
    start[0] = t;
    stop[0] = t + 1;
    steps.push_back(mx::reshape(mx::slice(a, start, stop, s), step_shape, s));
  }
  return steps;
}

std::optional<Config> ParseConfig(const Node& n, Cell cell, std::string* reason) {
  Config cfg;
  cfg.cell = cell;
  const std::string direction = n.AttrString("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    *reason = "attribute direction=" + direction + " not supported";
    return std::nullopt;
  }
  cfg.num_directions = direction == "bidirectional" ? 2 : 1;
  cfg.reverse = direction == "reverse";
  const int64_t hidden = n.AttrInt("hidden_size", 0);
  if (hidden <= 0 || hidden > (int64_t{1} << 24)) {
    *reason = n.Attr("hidden_size") ? "attribute hidden_size=" + std::to_string(hidden) + " not supported"
                                    : "attribute hidden_size is absent (ORT's CPU kernels require it)";
    return std::nullopt;
  }
  cfg.hidden_size = static_cast<int>(hidden);
  if (n.Attr("clip")) {
    const float clip = n.AttrFloat("clip", 0.f);
    if (!(clip > 0.f)) {
      *reason = "attribute clip=" + std::to_string(clip) + " is not positive";
      return std::nullopt;
    }
    cfg.clip = clip;
  }
  const int64_t layout = n.AttrInt("layout", 0);
  if (layout != 0 && layout != 1) {
    *reason = "attribute layout=" + std::to_string(layout) + " not supported";
    return std::nullopt;
  }
  cfg.batch_major = layout == 1;
  cfg.input_forget = cell == Cell::kLstm && n.AttrInt("input_forget", 0) != 0;
  cfg.linear_before_reset = cell == Cell::kGru && n.AttrInt("linear_before_reset", 0) != 0;
  if (!ParseActivations(n, &cfg, reason)) return std::nullopt;
  return cfg;
}

Inputs ReadInputs(const OpContext& c, const Config& cfg) {
  const mx::Stream s = c.stream;
  auto f32 = [&](const mx::array& a) { return mx::astype(a, mx::float32, s); };
  const mx::array& x_in = c.input(0);
  if (x_in.ndim() != 3) c.Fail("X must have rank 3, got rank " + std::to_string(x_in.ndim()));
  Inputs in(f32(cfg.batch_major ? mx::transpose(x_in, {1, 0, 2}, s) : x_in), f32(c.input(1)),
            f32(c.input(2)));
  in.seq = in.x.shape(0);
  in.batch = in.x.shape(1);
  in.input_size = in.x.shape(2);
  const int D = cfg.num_directions, H = cfg.hidden_size, GH = GatesOf(cfg.cell) * H, B = in.batch;
  ExpectShape(c, "W", in.w, {D, GH, in.input_size});
  ExpectShape(c, "R", in.r, {D, GH, H});
  if (c.has_input(3)) {
    in.bias = f32(c.input(3));
    ExpectShape(c, "B", *in.bias, {D, 2 * GH});
  }
  if (c.has_input(4)) {
    ExpectShape(c, "sequence_lens", c.input(4), {B});
    const mx::array& lens = c.input(4);
    c.Require(mx::logical_and(mx::greater_equal(lens, mx::array(0, lens.dtype()), s),
                              mx::less_equal(lens, mx::array(in.seq, lens.dtype()), s), s),
              "Invalid value/s in sequence_lens. All values must be >= 0 and <= seq_length");
    in.lens = mx::reshape(mx::astype(c.input(4), mx::int32, s), {B, 1}, s);
  }
  // Initial states: [D, B, H], or [B, D, H] with layout=1.
  auto state = [&](size_t i, const char* what) -> std::optional<mx::array> {
    if (!c.has_input(i)) return std::nullopt;
    const mx::array& a = c.input(i);
    ExpectShape(c, what, a, cfg.batch_major ? mx::Shape{B, D, H} : mx::Shape{D, B, H});
    return f32(cfg.batch_major ? mx::transpose(a, {1, 0, 2}, s) : a);
  };
  in.h0 = state(5, "initial_h");
  if (cfg.cell == Cell::kLstm) {
    in.c0 = state(6, "initial_c");
    if (c.has_input(7)) {
      in.peepholes = f32(c.input(7));
      ExpectShape(c, "P", *in.peepholes, {D, 3 * H});
    }
  }
  return in;
}

mx::array OfDirection(const mx::array& a, int d, mx::Stream s) {
  mx::Shape start(a.ndim(), 0), stop = a.shape();
  start[0] = d;
  stop[0] = d + 1;
  return mx::squeeze(mx::slice(a, start, stop, s), 0, s);
}

mx::array MatmulOrZeros(const mx::array& a, const mx::array& b, mx::Stream s) {
  if (a.shape(0) == 0 || b.shape(1) == 0 || a.shape(1) == 0)
    return mx::zeros({a.shape(0), b.shape(1)}, mx::float32, s);
  return mx::matmul(a, b, s);
}

mx::array Weights(const mx::array& w, int d, mx::Stream s) { return mx::transpose(OfDirection(w, d, s), s); }

std::optional<std::pair<mx::array, mx::array>> BiasParts(const Inputs& in, int d, mx::Stream s) {
  if (!in.bias) return std::nullopt;
  const mx::array b = OfDirection(*in.bias, d, s);
  const int gh = b.shape(0) / 2;
  return std::make_pair(mx::slice(b, {0}, {gh}, s), mx::slice(b, {gh}, {2 * gh}, s));
}

mx::array InputProjection(const Inputs& in, int d, const std::optional<mx::array>& folded, mx::Stream s) {
  const int S = in.seq, B = in.batch;
  const mx::array w = Weights(in.w, d, s);  // [I, G*H]
  const int GH = w.shape(1);
  mx::array xw = MatmulOrZeros(mx::reshape(in.x, {S * B, in.input_size}, s), w, s);
  if (folded) xw = mx::add(xw, *folded, s);
  return mx::reshape(xw, {S, B, GH}, s);
}

mx::array Activate(const Activation& a, const mx::array& x, mx::Stream s) {
  auto k = [](float v) { return mx::array(v, mx::float32); };
  const std::string& f = a.name;
  if (f == "sigmoid") return mx::sigmoid(x, s);
  if (f == "tanh") return mx::tanh(x, s);
  if (f == "relu") return mx::maximum(x, k(0.f), s);
  if (f == "affine") return mx::add(mx::multiply(k(a.alpha), x, s), k(a.beta), s);
  if (f == "leakyrelu")
    return mx::where(mx::greater_equal(x, k(0.f), s), x, mx::multiply(k(a.alpha), x, s), s);
  if (f == "thresholdedrelu") return mx::where(mx::greater(x, k(a.alpha), s), x, k(0.f), s);
  if (f == "scaledtanh") return mx::multiply(k(a.alpha), mx::tanh(mx::multiply(k(a.beta), x, s), s), s);
  if (f == "hardsigmoid") {
    const mx::array lin = mx::add(mx::multiply(k(a.alpha), x, s), k(a.beta), s);
    return mx::minimum(k(1.f), mx::maximum(k(0.f), lin, s), s);
  }
  if (f == "elu") {
    const mx::array em1 = mx::subtract(unary::Exp(x, s), k(1.f), s);
    return mx::where(mx::greater_equal(x, k(0.f), s), x, mx::multiply(k(a.alpha), em1, s), s);
  }
  if (f == "softsign") return mx::divide(x, mx::add(k(1.f), mx::abs(x, s), s), s);
  if (f == "softplus") return mx::log(mx::add(k(1.f), unary::Exp(x, s), s), s);  // ORT: log(1 + e^x)
  throw std::logic_error("[MlxEp] unknown recurrent activation " + f);
}

mx::array Clip(const Config& cfg, const mx::array& x, mx::Stream s) {
  if (!cfg.clip) return x;
  return mx::clip(x, mx::array(-*cfg.clip, mx::float32), mx::array(*cfg.clip, mx::float32), s);
}

State InitialState(const Config& cfg, const Inputs& in, int d, mx::Stream s) {
  const mx::Shape shape = {in.batch, cfg.hidden_size};
  State state = {in.h0 ? OfDirection(*in.h0, d, s) : mx::zeros(shape, mx::float32, s)};
  if (cfg.cell == Cell::kLstm)
    state.push_back(in.c0 ? OfDirection(*in.c0, d, s) : mx::zeros(shape, mx::float32, s));
  return state;
}

/** Per time index, which batch entries are within their length ([B, 1] bools each). They come out
 *  of one comparison, split by step, so that no fused kernel holds a step's index as a constant
 *  (MLX compiles a fused kernel per distinct constant: one per step otherwise). */
std::vector<mx::array> StepMasks(const Inputs& in, mx::Stream s) {
  const mx::array steps = mx::reshape(mx::arange(in.seq, mx::int32, s), {in.seq, 1, 1}, s);
  const mx::array valid = mx::less(steps, mx::expand_dims(*in.lens, 0, s), s);  // [S, B, 1]
  return SplitSteps(valid, s);
}

DirectionResult RunDirection(const Inputs& in, bool reverse, State state, const StepFn& step, mx::Stream s) {
  DirectionResult res;
  const mx::array zero(0.f, mx::float32);
  const std::vector<mx::array> masks = in.lens && in.seq > 0 ? StepMasks(in, s) : std::vector<mx::array>{};
  for (int k = 0; k < in.seq; ++k) {
    const int t = reverse ? in.seq - 1 - k : k;
    State next = step(t, state);
    if (in.lens) {
      res.ys.push_back(mx::where(masks[t], next[0], zero, s));
      for (size_t j = 0; j < next.size(); ++j) next[j] = mx::where(masks[t], next[j], state[j], s);
    } else {
      res.ys.push_back(next[0]);
    }
    state = std::move(next);
  }
  if (reverse) std::reverse(res.ys.begin(), res.ys.end());
  // ORT returns zeros as the final state of an empty sequence (not the initial state).
  if (in.seq == 0) {
    for (mx::array& a : state) a = mx::zeros_like(a, s);
  } else if (in.lens) {
    const mx::array nonempty = mx::greater(*in.lens, mx::array(0, mx::int32), s);
    for (mx::array& a : state) a = mx::where(nonempty, a, zero, s);
  }
  res.last = std::move(state);
  return res;
}

std::vector<mx::array> AssembleOutputs(const OpContext& c, const Config& cfg, const Inputs& in,
                                       const std::vector<DirectionResult>& dirs) {
  const mx::Stream s = c.stream;
  const int max_outputs = cfg.cell == Cell::kLstm ? 3 : 2;
  if (static_cast<int>(c.num_outputs()) > max_outputs) c.Fail("too many outputs");
  const int D = cfg.num_directions, H = cfg.hidden_size;
  const mx::Dtype dtype = c.input(0).dtype();
  auto finish = [&](mx::array a, std::vector<int> batch_major_perm) {
    if (cfg.batch_major) a = mx::transpose(a, batch_major_perm, s);
    return mx::astype(a, dtype, s);
  };
  std::vector<mx::array> outs;
  // Y: [S, D, B, H] (layout 1: [B, S, D, H]); built only when used.
  if (c.num_outputs() > 0 && !c.node.outputs[0].empty() && in.seq > 0) {
    std::vector<mx::array> per_dir;
    for (const auto& r : dirs) per_dir.push_back(r.y_all ? *r.y_all : mx::stack(r.ys, 0, s));
    outs.push_back(finish(mx::stack(per_dir, 1, s), {2, 0, 1, 3}));
  } else {
    outs.push_back(finish(mx::zeros({in.seq, D, in.batch, H}, mx::float32, s), {2, 0, 1, 3}));
  }
  for (size_t k = 0; k + 1 < c.num_outputs(); ++k) {  // Y_h, Y_c: [D, B, H] (layout 1: [B, D, H])
    std::vector<mx::array> finals;
    for (const auto& r : dirs) finals.push_back(r.last.at(k));
    outs.push_back(finish(mx::stack(finals, 0, s), {1, 0, 2}));
  }
  return outs;
}

Claim ClaimRecurrent(const NodeView& v, Cell cell) {
  const ElemType t = v.input_type(0);
  if (t == ElemType::kDouble)
    return Claim::No(TypeReason(v, 0, "ORT's CPU kernels have no float64 implementation"));
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  if (!DeviceSupports(t)) return Claim::No(TypeReason(v, 0, "not supported on the MLX device"));
  for (size_t i : {1, 2, 3, 5, 6, 7})
    if (v.has_input(i) && v.input_type(i) != t) return Claim::No(TypeReason(v, i, "differs from X"));
  if (v.has_input(4) && v.input_type(4) != ElemType::kInt32)
    return Claim::No(TypeReason(v, 4, "sequence_lens"));
  for (size_t k = 0; k < v.num_outputs(); ++k)
    if (v.has_output(k) && v.output_type(k) != t)
      return Claim::No("output " + std::to_string(k) + " differs from X's type");
  std::string reason;
  const std::optional<Config> cfg = ParseConfig(v.node(), cell, &reason);
  if (!cfg) return Claim::No(reason);
  // ORT rejects lengths outside [0, seq_length]; known ones are checked here so that ORT reports it.
  if (const Tensor* lens = v.constant_input(4)) {
    const auto shape = v.input_shape(0);
    const int64_t seq = shape && shape->size() == 3 ? (*shape)[cfg->batch_major ? 1 : 0] : -1;
    for (int64_t len : lens->ToInt64())
      if (len < 0 || (seq >= 0 && len > seq))
        return Claim::No("sequence_lens holds " + std::to_string(len) + ", outside [0, seq_length]");
  }
  return Claim::Yes();
}

}  // namespace recurrent

namespace {

using recurrent::Cell;

// RNN: H_t = f(X_t·W^T + H_{t-1}·R^T + Wb + Rb).
std::vector<mx::array> TranslateRnn(const OpContext& c) {
  const mx::Stream s = c.stream;
  std::string reason;
  const std::optional<recurrent::Config> cfg = recurrent::ParseConfig(c.node, Cell::kRnn, &reason);
  if (!cfg) c.Fail(reason);
  const recurrent::Inputs in = recurrent::ReadInputs(c, *cfg);
  std::vector<recurrent::DirectionResult> dirs;
  for (int d = 0; d < cfg->num_directions; ++d) {
    std::optional<mx::array> bias;
    if (auto parts = recurrent::BiasParts(in, d, s)) bias = mx::add(parts->first, parts->second, s);
    const mx::array xw_all = recurrent::InputProjection(in, d, bias, s);
    if (auto on_cpu = recurrent::DirectionOnCpu(*cfg, in, d, xw_all, std::nullopt, s)) {
      dirs.push_back(std::move(*on_cpu));
      continue;
    }
    const std::vector<mx::array> xw = recurrent::SplitSteps(xw_all, s);
    const mx::array r = recurrent::Weights(in.r, d, s);  // [H, H]
    const recurrent::Activation& f = cfg->activations[d][0];
    auto step = [&](int t, const recurrent::State& prev) -> recurrent::State {
      const mx::array pre = mx::add(xw[t], recurrent::MatmulOrZeros(prev[0], r, s), s);
      return {recurrent::Activate(f, recurrent::Clip(*cfg, pre, s), s)};
    };
    dirs.push_back(recurrent::RunDirection(in, cfg->reverse || d == 1,
                                           recurrent::InitialState(*cfg, in, d, s), step, s));
  }
  return recurrent::AssembleOutputs(c, *cfg, in, dirs);
}

Claim ClaimRnn(const NodeView& v) { return recurrent::ClaimRecurrent(v, Cell::kRnn); }
Claim ClaimGru(const NodeView& v) { return recurrent::ClaimRecurrent(v, Cell::kGru); }
Claim ClaimLstm(const NodeView& v) { return recurrent::ClaimRecurrent(v, Cell::kLstm); }

}  // namespace

void RegisterRecurrentOps(OpRegistry& r) {
  // 14 added `layout`; 22 only widened the types (bfloat16).
  for (auto [since, until] : {std::pair{7, 13}, std::pair{14, 22}}) {
    r.Add({"", "RNN", since, until, ClaimRnn, TranslateRnn});
    r.Add({"", "GRU", since, until, ClaimGru, TranslateGru});
    r.Add({"", "LSTM", since, until, ClaimLstm, TranslateLstm});
  }
}

}  // namespace mlx_ep
