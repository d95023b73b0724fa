// Op family (part of recurrent, see recurrent.cc): the LSTM and GRU cells. Each step follows the
// equations of ORT's deep CPU kernels (uni_directional_lstm.cc, deep_cpu_gru.cc) in float32; the
// biases that do not depend on the step are folded into the one X·W^T matmul.
#include "ops/recurrent_internal.h"

namespace mlx_ep {
namespace {

using recurrent::Activate;
using recurrent::Cell;
using recurrent::Clip;
using recurrent::Config;
using recurrent::Inputs;
using recurrent::State;

mx::array One() { return mx::array(1.f, mx::float32); }

/** The node's configuration (c.Fail when the claim would have declined it). */
Config ReadConfig(const OpContext& c, Cell cell) {
  std::string reason;
  std::optional<Config> cfg = recurrent::ParseConfig(c.node, cell, &reason);
  if (!cfg) c.Fail(reason);
  return *cfg;
}

// LSTM, gates in ONNX's order i, o, f, c (f, g, h = activations; P = peepholes):
//   i = f(X·Wi + H·Ri + Pi*C + b_i)      f = f(X·Wf + H·Rf + Pf*C + b_f)  (1 - i with input_forget)
//   c~ = g(X·Wc + H·Rc + b_c)            C' = f*C + i*c~
//   o = f(X·Wo + H·Ro + Po*C' + b_o)     H' = o * h(C')
// clip bounds the gate inputs before f and g (not C' before h), as ORT does.
recurrent::DirectionResult LstmDirection(const Config& cfg, const Inputs& in, int d, mx::Stream s) {
  std::optional<mx::array> bias;
  if (auto parts = recurrent::BiasParts(in, d, s)) bias = mx::add(parts->first, parts->second, s);
  const mx::array xw_all = recurrent::InputProjection(in, d, bias, s);
  if (auto on_cpu = recurrent::DirectionOnCpu(cfg, in, d, xw_all, std::nullopt, s)) return *on_cpu;
  const std::vector<mx::array> xw = recurrent::SplitSteps(xw_all, s);
  const mx::array r = recurrent::Weights(in.r, d, s);  // [H, 4H]
  std::optional<mx::array> p_i, p_o, p_f;
  if (in.peepholes) {
    const std::vector<mx::array> p = mx::split(recurrent::OfDirection(*in.peepholes, d, s), 3, 0, s);
    p_i = p[0];
    p_o = p[1];
    p_f = p[2];
  }
  const std::vector<recurrent::Activation>& act = cfg.activations[d];
  auto step = [&](int t, const State& prev) -> State {
    const mx::array& h = prev[0];
    const mx::array& cell = prev[1];
    const std::vector<mx::array> g = mx::split(mx::add(xw[t], recurrent::MatmulOrZeros(h, r, s), s), 4, 1, s);
    auto gate = [&](mx::array pre, const std::optional<mx::array>& peephole, const mx::array& c) {
      if (peephole) pre = mx::add(pre, mx::multiply(c, *peephole, s), s);
      return Activate(act[0], Clip(cfg, pre, s), s);
    };
    const mx::array i = gate(g[0], p_i, cell);
    const mx::array f = cfg.input_forget ? mx::subtract(One(), i, s) : gate(g[2], p_f, cell);
    const mx::array c_in = Activate(act[1], Clip(cfg, g[3], s), s);
    const mx::array c_next = mx::add(mx::multiply(cell, f, s), mx::multiply(i, c_in, s), s);
    const mx::array o = gate(g[1], p_o, c_next);
    return {mx::multiply(o, Activate(act[2], c_next, s), s), c_next};
  };
  return recurrent::RunDirection(in, cfg.reverse || d == 1, recurrent::InitialState(cfg, in, d, s), step, s);
}

// GRU, gates z, r, h (f, g = activations):
//   z = f(X·Wz + H·Rz + Wbz + Rbz)       r = f(X·Wr + H·Rr + Wbr + Rbr)
//   h~ = g(X·Wh + (r*H)·Rh + Wbh + Rbh)          linear_before_reset = 0
//   h~ = g(X·Wh + r*(H·Rh + Rbh) + Wbh)          linear_before_reset = 1
//   H' = (1 - z)*h~ + z*H
recurrent::DirectionResult GruDirection(const Config& cfg, const Inputs& in, int d, mx::Stream s) {
  const int H = cfg.hidden_size;
  const bool lbr = cfg.linear_before_reset;
  // Folded into X·W^T: Wb + Rb, except Rbh with linear_before_reset (it is scaled by r).
  std::optional<mx::array> folded, rbh;
  if (auto parts = recurrent::BiasParts(in, d, s)) {
    const auto& [wb, rb] = *parts;
    if (lbr) {
      rbh = mx::slice(rb, {2 * H}, {3 * H}, s);
      folded = mx::add(
          wb, mx::concatenate({mx::slice(rb, {0}, {2 * H}, s), mx::zeros({H}, mx::float32, s)}, 0, s), s);
    } else {
      folded = mx::add(wb, rb, s);
    }
  }
  const mx::array xw_all = recurrent::InputProjection(in, d, folded, s);
  if (auto on_cpu = recurrent::DirectionOnCpu(cfg, in, d, xw_all, rbh, s)) return *on_cpu;
  const std::vector<mx::array> xw = recurrent::SplitSteps(xw_all, s);
  const mx::array r_all = recurrent::Weights(in.r, d, s);  // [H, 3H]: z, r, h
  const mx::array r_zr = mx::slice(r_all, {0, 0}, {H, 2 * H}, s);
  const mx::array r_h = mx::slice(r_all, {0, 2 * H}, {H, 3 * H}, s);
  const recurrent::Activation& f = cfg.activations[d][0];
  const recurrent::Activation& g = cfg.activations[d][1];
  auto step = [&](int t, const State& prev) -> State {
    const mx::array& h = prev[0];
    const std::vector<mx::array> x = mx::split(xw[t], 3, 1, s);
    const std::vector<mx::array> hr =
        mx::split(recurrent::MatmulOrZeros(h, lbr ? r_all : r_zr, s), lbr ? 3 : 2, 1, s);
    const mx::array z = Activate(f, Clip(cfg, mx::add(x[0], hr[0], s), s), s);
    const mx::array reset = Activate(f, Clip(cfg, mx::add(x[1], hr[1], s), s), s);
    mx::array h_pre = x[2];
    if (lbr) {
      const mx::array linear = rbh ? mx::add(hr[2], *rbh, s) : hr[2];
      h_pre = mx::add(h_pre, mx::multiply(reset, linear, s), s);
    } else {
      h_pre = mx::add(h_pre, recurrent::MatmulOrZeros(mx::multiply(reset, h, s), r_h, s), s);
    }
    const mx::array h_new = Activate(g, Clip(cfg, h_pre, s), s);
    return {mx::add(mx::multiply(mx::subtract(One(), z, s), h_new, s), mx::multiply(z, h, s), s)};
  };
  return recurrent::RunDirection(in, cfg.reverse || d == 1, recurrent::InitialState(cfg, in, d, s), step, s);
}

}  // namespace

std::vector<mx::array> TranslateLstm(const OpContext& c) {
  const Config cfg = ReadConfig(c, Cell::kLstm);
  const Inputs in = recurrent::ReadInputs(c, cfg);
  std::vector<recurrent::DirectionResult> dirs;
  for (int d = 0; d < cfg.num_directions; ++d) dirs.push_back(LstmDirection(cfg, in, d, c.stream));
  return recurrent::AssembleOutputs(c, cfg, in, dirs);
}

std::vector<mx::array> TranslateGru(const OpContext& c) {
  const Config cfg = ReadConfig(c, Cell::kGru);
  const Inputs in = recurrent::ReadInputs(c, cfg);
  std::vector<recurrent::DirectionResult> dirs;
  for (int d = 0; d < cfg.num_directions; ++d) dirs.push_back(GruDirection(cfg, in, d, c.stream));
  return recurrent::AssembleOutputs(c, cfg, in, dirs);
}

}  // namespace mlx_ep
