// Op family (part of recurrent, see recurrent.cc): one direction of an RNN, GRU or LSTM node on
// MLX's CPU device as one primitive of the EP's (recurrent_internal.h, DirectionOnCpu).
//
// The composed form unrolls the time loop: per step a matmul, the gate slices and their fused
// arithmetic, and with sequence_lens the masks: ~10 MLX primitives a step, each evaluated every
// run, which on small models costs more than the arithmetic (a torchscript CRNN export made
// 1,348 MLX primitives a run, 72 with this). Here the loop runs in C++ over the same equations
// (recurrent_cells.cc states them, with ORT's formulas for the activations): X·W^T and the
// foldable biases stay one MLX matmul before it; each step computes h·R^T (OpenBLAS where the EP
// has it, as MLX's matmuls; R read as stored), applies the gates in float32 (sigmoid and tanh
// through the exp-family primitive's vectorized loops, unary_cpu.h), and masks by sequence length
// as RunDirection does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "blas/blas.h"
#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/cpu_primitive.h"
#include "ops/recurrent_internal.h"
#include "ops/unary_cpu.h"

namespace mlx_ep {
namespace recurrent {
namespace {

enum class Fn {
  kSigmoid,
  kTanh,
  kRelu,
  kAffine,
  kLeakyRelu,
  kThresholdedRelu,
  kScaledTanh,
  kHardSigmoid,
  kElu,
  kSoftsign,
  kSoftplus
};

struct FnSpec {
  Fn fn = Fn::kSigmoid;
  float alpha = 0.f, beta = 0.f;
  bool operator==(const FnSpec&) const = default;
};

std::optional<Fn> FnOf(const std::string& name) {
  static const std::pair<const char*, Fn> kNames[] = {{"sigmoid", Fn::kSigmoid},
                                                      {"tanh", Fn::kTanh},
                                                      {"relu", Fn::kRelu},
                                                      {"affine", Fn::kAffine},
                                                      {"leakyrelu", Fn::kLeakyRelu},
                                                      {"thresholdedrelu", Fn::kThresholdedRelu},
                                                      {"scaledtanh", Fn::kScaledTanh},
                                                      {"hardsigmoid", Fn::kHardSigmoid},
                                                      {"elu", Fn::kElu},
                                                      {"softsign", Fn::kSoftsign},
                                                      {"softplus", Fn::kSoftplus}};
  for (const auto& [n, f] : kNames)
    if (name == n) return f;
  return std::nullopt;
}

/** e^x of float x, rounded once (as unary::Exp's primitive). */
float ExpF(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }

/** The activation as Activate (recurrent.cc) computes it; sigmoid and tanh as the exp-family
 *  primitive's loops (ApplyAll takes them over whole rows). */
float Apply(const FnSpec& a, float x) {
  switch (a.fn) {
    case Fn::kSigmoid:
    case Fn::kTanh: {
      float y;
      ExpFormValues(a.fn == Fn::kSigmoid ? ExpForm::kSigmoid : ExpForm::kTanh, &x, &y, 1);
      return y;
    }
    case Fn::kRelu:
      return x > 0.f ? x : (x == x ? 0.f : x);
    case Fn::kAffine:
      return a.alpha * x + a.beta;
    case Fn::kLeakyRelu:
      return x >= 0.f ? x : a.alpha * x;
    case Fn::kThresholdedRelu:
      return x > a.alpha ? x : 0.f;
    case Fn::kScaledTanh:
      return a.alpha * std::tanh(a.beta * x);
    case Fn::kHardSigmoid:
      return std::min(1.f, std::max(0.f, a.alpha * x + a.beta));
    case Fn::kElu:
      return x >= 0.f ? x : a.alpha * (ExpF(x) - 1.f);
    case Fn::kSoftsign:
      return x / (1.f + std::fabs(x));
    case Fn::kSoftplus:
      return std::log(1.f + ExpF(x));
  }
  return x;
}

/** Apply over `n` values in place: sigmoid and tanh as the exp-family primitive's loops (unary_cpu.h:
 *  double precision rounded once, vectorized), the others one value at a time. */
void ApplyAll(const FnSpec& a, float* v, int64_t n) {
  if (a.fn == Fn::kSigmoid || a.fn == Fn::kTanh)
    return ExpFormValues(a.fn == Fn::kSigmoid ? ExpForm::kSigmoid : ExpForm::kTanh, v, v, n);
  for (int64_t i = 0; i < n; ++i) v[i] = Apply(a, v[i]);
}

struct RecurrenceParams {
  Cell cell = Cell::kRnn;
  int hidden = 0;
  FnSpec f, g, h;  ///< the cell's functions (RNN: f; GRU: f, g; LSTM: f, g, h)
  bool has_clip = false;
  float clip = 0.f;
  bool input_forget = false, linear_before_reset = false, reverse = false;
  bool has_lens = false, has_peepholes = false, has_rbh = false;
  bool operator==(const RecurrenceParams&) const = default;
};

float Clipped(const RecurrenceParams& p, float x) {
  return p.has_clip ? std::min(p.clip, std::max(-p.clip, x)) : x;
}

/** c [rows, n] (rows `ldc` apart) = a [rows, k] @ b^T, b [n, k] row-major (R as ONNX stores it,
 *  so no transposed copy per run): OpenBLAS through the shim where the EP has it (the BLAS MLX's
 *  matmuls use), else dot products of four partial sums. */
MLX_EP_CLONES void DotRows(const float* a, int64_t rows, int64_t k, const float* b, int64_t n, float* c,
                           int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float *x = a + r * k, *y = b + j * k;
      float s[4] = {0.f, 0.f, 0.f, 0.f};
      int64_t i = 0;
      for (; i + 4 <= k; i += 4)
        for (int l = 0; l < 4; ++l) s[l] += x[i + l] * y[i + l];
      float sum = (s[0] + s[1]) + (s[2] + s[3]);
      for (; i < k; ++i) sum += x[i] * y[i];
      c[r * ldc + j] = sum;
    }
}

void Product(const float* a, int64_t rows, int64_t k, const float* b, int64_t n, float* c, int64_t ldc) {
  if (rows == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t r = 0; r < rows; ++r) std::fill(c + r * ldc, c + r * ldc + n, 0.f);
    return;
  }
  // ONNXRUNTIME_EP_MLX_RECURRENT_CPU_KERNEL=portable: the dot products even with the shim (tests;
  // they are what builds without it, macOS's, run).
  static const bool portable = EnvString(env::kRecurrentCpuKernel) == "portable";
  if (!portable && HaveSgemm() &&
      SgemmRowsByColumns(static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), a,
                         static_cast<int>(k), b, static_cast<int>(k), c, static_cast<int>(ldc)))
    return;
  DotRows(a, rows, k, b, n, c, ldc);
}

/** The primitive's inputs as pointers, in the order DirectionOnCpu passes them. */
struct StepInputs {
  const float* xw = nullptr;  ///< [S, B, G*H]: X·W^T plus the foldable biases
  const float* r = nullptr;   ///< [G*H, H]: R of the direction, as stored
  const float *h0 = nullptr, *c0 = nullptr, *peep = nullptr, *rbh = nullptr;
  const int32_t* lens = nullptr;
  int64_t seq = 0, batch = 0;
};

/** Scratch of a direction's steps. */
struct StepBuffers {
  std::vector<float> hr;     ///< [B, G*H]: h·R^T
  std::vector<float> reset;  ///< GRU: [B, H] r, then [B, H] r * h, then [B, H] (r * h)·R_h^T
  std::vector<float> gates;  ///< [5, H]: one batch row's activations (LSTM i, f, c, o, tanh(c))
};

/** One step for every batch row: the new h (and c) from the step's `x` ([B, G*H]) and the state. */
void Step(const RecurrenceParams& p, const StepInputs& in, const float* x, const float* h, const float* c,
          float* h_out, float* c_out, StepBuffers& buf) {
  const int64_t H = p.hidden, B = in.batch;
  const int64_t gh = (p.cell == Cell::kLstm ? 4 : p.cell == Cell::kGru ? 3 : 1) * H;
  // h·R^T; for a GRU without linear_before_reset the h gate's product waits for r * h.
  const bool gru_after_reset = p.cell == Cell::kGru && !p.linear_before_reset;
  buf.hr.resize(B * gh);
  Product(h, B, H, in.r, gru_after_reset ? 2 * H : gh, buf.hr.data(), gh);
  float *r = nullptr, *rh = nullptr;
  if (p.cell == Cell::kGru) {
    buf.reset.resize(3 * B * H);
    r = buf.reset.data();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < H; ++k) r[b * H + k] = Clipped(p, x[b * gh + H + k] + buf.hr[b * gh + H + k]);
    ApplyAll(p.f, r, B * H);
    if (gru_after_reset) {
      float* reset_h = r + B * H;
      rh = r + 2 * B * H;
      for (int64_t i = 0; i < B * H; ++i) reset_h[i] = r[i] * h[i];
      Product(reset_h, B, H, in.r + 2 * H * H, H, rh, H);
    }
  }
  // Each gate's pre-activations for a batch row first, then its function over all of them
  // (ApplyAll), then what combines them: the same values, element by element, as one at a time.
  buf.gates.resize(5 * H);
  float* g0 = buf.gates.data();
  float *g1 = g0 + H, *g2 = g0 + 2 * H, *g3 = g0 + 3 * H, *g4 = g0 + 4 * H;
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x + b * gh;
    const float* hrb = buf.hr.data() + b * gh;
    const float* hb = h + b * H;
    float* ho = h_out + b * H;
    if (p.cell == Cell::kRnn) {
      for (int64_t k = 0; k < H; ++k) ho[k] = Clipped(p, xb[k] + hrb[k]);
      ApplyAll(p.f, ho, H);
    } else if (p.cell == Cell::kLstm) {  // gates i, o, f, c; peepholes i, o, f
      const float* cb = c + b * H;
      float* cn = c_out + b * H;
      // Gate `at`'s pre-activation for unit k, with peephole `which` on `cell`.
      auto pre = [&](int64_t at, int which, float cell, int64_t k) {
        float v = xb[at * H + k] + hrb[at * H + k];
        if (p.has_peepholes) v += cell * in.peep[which * H + k];
        return Clipped(p, v);
      };
      for (int64_t k = 0; k < H; ++k) {
        g0[k] = pre(0, 0, cb[k], k);                         // i
        if (!p.input_forget) g1[k] = pre(2, 2, cb[k], k);    // f
        g2[k] = Clipped(p, xb[3 * H + k] + hrb[3 * H + k]);  // c
      }
      ApplyAll(p.f, g0, H);
      if (!p.input_forget) ApplyAll(p.f, g1, H);
      ApplyAll(p.g, g2, H);
      for (int64_t k = 0; k < H; ++k) {
        const float f = p.input_forget ? 1.f - g0[k] : g1[k];
        cn[k] = cb[k] * f + g0[k] * g2[k];
        g3[k] = pre(1, 1, cn[k], k);  // o, its peephole on the new cell
        g4[k] = cn[k];
      }
      ApplyAll(p.f, g3, H);
      ApplyAll(p.h, g4, H);
      for (int64_t k = 0; k < H; ++k) ho[k] = g3[k] * g4[k];
    } else {  // gates z, r, h
      for (int64_t k = 0; k < H; ++k) {
        g0[k] = Clipped(p, xb[k] + hrb[k]);  // z
        const float reset = r[b * H + k];
        float h_pre;
        if (p.linear_before_reset) {
          const float linear = p.has_rbh ? hrb[2 * H + k] + in.rbh[k] : hrb[2 * H + k];
          h_pre = xb[2 * H + k] + reset * linear;
        } else {
          h_pre = xb[2 * H + k] + rh[b * H + k];
        }
        g1[k] = Clipped(p, h_pre);
      }
      ApplyAll(p.f, g0, H);
      ApplyAll(p.g, g1, H);
      for (int64_t k = 0; k < H; ++k) ho[k] = (1.f - g0[k]) * g1[k] + g0[k] * hb[k];
    }
  }
}

/** The whole direction: Y [S, B, H] and the final h (and c) [B, H], as RunDirection gives them. */
void Run(const RecurrenceParams& p, const StepInputs& in, float* y, float* h_last, float* c_last) {
  const int64_t H = p.hidden, B = in.batch, S = in.seq;
  const int64_t gh = (p.cell == Cell::kLstm ? 4 : p.cell == Cell::kGru ? 3 : 1) * H;
  const bool lstm = p.cell == Cell::kLstm;
  std::vector<float> h(in.h0, in.h0 + B * H), c, h_next(B * H), c_next;
  StepBuffers buf;
  if (lstm) {
    c.assign(in.c0, in.c0 + B * H);
    c_next.resize(B * H);
  }
  for (int64_t k = 0; k < S; ++k) {
    const int64_t t = p.reverse ? S - 1 - k : k;
    Step(p, in, in.xw + t * B * gh, h.data(), lstm ? c.data() : nullptr, h_next.data(),
         lstm ? c_next.data() : nullptr, buf);
    for (int64_t b = 0; b < B; ++b) {
      // Past a row's length its state stays and its output is 0 (the reverse direction thereby
      // starts at the row's last valid step).
      const bool valid = !p.has_lens || t < std::clamp<int64_t>(in.lens[b], 0, S);
      float* yb = y + (t * B + b) * H;
      if (valid) {
        std::copy_n(h_next.data() + b * H, H, yb);
        std::copy_n(h_next.data() + b * H, H, h.data() + b * H);
        if (lstm) std::copy_n(c_next.data() + b * H, H, c.data() + b * H);
      } else {
        std::fill(yb, yb + H, 0.f);
      }
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    // ORT gives zeros as the final state of an empty sequence, not the initial state.
    const bool empty = S == 0 || (p.has_lens && in.lens[b] <= 0);
    for (int64_t k = 0; k < H; ++k) {
      h_last[b * H + k] = empty ? 0.f : h[b * H + k];
      if (lstm) c_last[b * H + k] = empty ? 0.f : c[b * H + k];
    }
  }
}

class RecurrenceCpu : public mx::Primitive {
 public:
  RecurrenceCpu(mx::Stream stream, RecurrenceParams p) : mx::Primitive(stream), p_(std::move(p)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    DispatchCpuTask(stream(), inputs, outputs,
                    [p = p_](const std::vector<mx::array>& in, std::vector<mx::array>& out) {
                      StepInputs si;
                      size_t next = 0;
                      si.xw = in[next++].data<float>();
                      si.r = in[next++].data<float>();
                      si.h0 = in[next++].data<float>();
                      if (p.cell == Cell::kLstm) si.c0 = in[next++].data<float>();
                      if (p.has_peepholes) si.peep = in[next++].data<float>();
                      if (p.has_rbh) si.rbh = in[next++].data<float>();
                      if (p.has_lens) si.lens = in[next++].data<int32_t>();
                      si.seq = in[0].shape(0);
                      si.batch = in[0].shape(1);
                      Run(p, si, out[0].data<float>(), out[1].data<float>(),
                          p.cell == Cell::kLstm ? out[2].data<float>() : nullptr);
                    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("RecurrenceCpu runs on the CPU only");
  }

  const char* name() const override { return "RecurrenceCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const RecurrenceCpu&>(other).p_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    const int S = inputs[0].shape(0), B = inputs[0].shape(1), H = p_.hidden;
    std::vector<mx::Shape> shapes = {{S, B, H}, {B, H}};
    if (p_.cell == Cell::kLstm) shapes.push_back({B, H});
    return shapes;
  }

 private:
  RecurrenceParams p_;
};

}  // namespace

std::optional<DirectionResult> DirectionOnCpu(const Config& cfg, const Inputs& in, int d, const mx::array& xw,
                                              const std::optional<mx::array>& rbh, mx::Stream s) {
  static const bool off = EnvOff(env::kRecurrentCpuKernel);
  if (off || s.device != mx::Device(mx::Device::cpu) || in.seq == 0 || in.batch == 0 || cfg.hidden_size == 0)
    return std::nullopt;
  RecurrenceParams p;
  p.cell = cfg.cell;
  p.hidden = cfg.hidden_size;
  const std::vector<Activation>& act = cfg.activations[d];
  FnSpec* specs[] = {&p.f, &p.g, &p.h};
  for (size_t k = 0; k < act.size() && k < 3; ++k) {
    const std::optional<Fn> fn = FnOf(act[k].name);
    if (!fn) return std::nullopt;  // Activate fails it as before
    *specs[k] = {*fn, act[k].alpha, act[k].beta};
  }
  p.has_clip = cfg.clip.has_value();
  p.clip = cfg.clip.value_or(0.f);
  p.input_forget = cfg.input_forget;
  p.linear_before_reset = cfg.linear_before_reset;
  p.reverse = cfg.reverse || d == 1;
  State init = InitialState(cfg, in, d, s);
  std::vector<mx::array> inputs = {xw, OfDirection(in.r, d, s), init[0]};  // R as stored: [G*H, H]
  if (cfg.cell == Cell::kLstm) inputs.push_back(init[1]);
  if (cfg.cell == Cell::kLstm && in.peepholes) {
    p.has_peepholes = true;
    inputs.push_back(OfDirection(*in.peepholes, d, s));
  }
  if (rbh) {
    p.has_rbh = true;
    inputs.push_back(*rbh);
  }
  if (in.lens) {
    p.has_lens = true;
    inputs.push_back(mx::reshape(*in.lens, {in.batch}, s));
  }
  const int S = in.seq, B = in.batch, H = cfg.hidden_size;
  std::vector<mx::Shape> shapes = {{S, B, H}, {B, H}};
  if (cfg.cell == Cell::kLstm) shapes.push_back({B, H});
  std::vector<mx::Dtype> dtypes(shapes.size(), mx::float32);
  std::vector<mx::array> outs = mx::array::make_arrays(
      std::move(shapes), std::move(dtypes), std::make_shared<RecurrenceCpu>(s, p), std::move(inputs));
  DirectionResult r;
  r.y_all = outs[0];
  r.last = {outs[1]};
  if (cfg.cell == Cell::kLstm) r.last.push_back(outs[2]);
  return r;
}

}  // namespace recurrent
}  // namespace mlx_ep
