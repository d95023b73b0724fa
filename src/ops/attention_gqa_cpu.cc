// GroupQueryAttention's attention core as a custom MLX primitive for the CPU stream
// (attention_gqa_cpu.h).
//
// Why a primitive: the composed MLX ops cannot know the real lengths when they are traced
// (seqlens_k is data), so they score, mask and softmax every row of the past buffer: with
// onnxruntime-genai's shared buffer that is max_length keys per decode step however short the
// context, and MLX's CPU exp is scalar. The primitive reads seqlens_k and total_sequence_length
// when it runs and visits, per query row, the keys [start, end) it attends only: past rows
// j < offset_b read from past_key/past_value themselves, then the step's new rows.
//
// It is an ordinary node of the traced graph (mx::compile keeps the partition in one piece and
// merges equal nodes through is_equivalent); on GPU streams attention_contrib_gqa.cc composes MLX
// ops and never creates it (eval_gpu refuses).
//
// Numerics, the composed path's but for exp: float32 throughout (float16 / bfloat16 widened on
// load), Q scaled before the dot products, softcap * tanh(x / softcap), + attention_bias, a
// max-subtracted softmax whose exp is Cephes' expf (<= 1 ulp over the softmax's arguments, where
// MLX's CPU exp errs by up to 64 ulp; 8 lanes at a time on AVX2: attention_gqa_cpu_loops.{h,cc}),
// head_sink (0 for smooth_softmax) an extra logit of the denominator. The output stays float32;
// the caller rounds it once to T.
//
// Threads: (batch, head) tasks on the MatMulNBits kernels' pool (quantized_cpu.h) when the step
// has enough work to pay for waking a worker.
#include "ops/attention_gqa_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "common/log.h"
#include "mlx/primitives.h"
#include "mlx/types/half_types.h"
#include "ops/attention_gqa_cpu_loops.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace gqa_cpu {
namespace {

/** The node's facts the kernel needs, fixed when it is traced. */
struct Params {
  int heads = 0, kv_heads = 0;
  int present_len = 0;  ///< L
  int window = -1;      ///< local_window_size (-1: none)
  float scale = 1.f, softcap = 0.f;
  bool smooth_softmax = false, has_past = false, has_bias = false, has_sink = false;
  bool portable = false;  ///< the portable loops even where AVX2 runs (tests)
  bool operator==(const Params&) const = default;
};

/** One run: the inputs' memory and dims. */
template <typename T>
struct Job {
  Params p;
  const T *q = nullptr, *k = nullptr, *v = nullptr, *past_k = nullptr, *past_v = nullptr;
  const T *bias = nullptr, *sink = nullptr;
  const int32_t* seqlens = nullptr;
  int32_t total = 0;
  int B = 0, S = 0, D = 0, P = 0;  ///< P: past rows (0 without past)
  int bias_b = 0, bias_h = 0, bias_cols = 0;
  float* y = nullptr;
};

template <typename T>
KeyRange KeysOf(const Job<T>& job, int b, int s) {
  return KeysOfRow(job.seqlens[b], job.total, job.S, s, job.P, job.p.present_len, job.p.window);
}

/** softcap and attention_bias on the row's scores (past keys first, then new ones). */
template <typename T>
void ShapeScores(const Job<T>& job, int b, int h, int s, const KeyRange& r, float* x) {
  const int64_t n = r.n_past + r.n_new;
  if (const float cap = job.p.softcap; cap > 0.f)
    for (int64_t j = 0; j < n; ++j) x[j] = std::tanh(x[j] / cap) * cap;
  if (!job.bias) return;
  const int bb = job.bias_b == 1 ? 0 : b, hb = job.bias_h == 1 ? 0 : h;
  const T* row = job.bias + ((static_cast<int64_t>(bb) * job.bias_h + hb) * job.S + s) * job.bias_cols;
  auto add = [&](int64_t pos, float& score) {  // columns past the bias's end are zeros
    if (pos < job.bias_cols) score += Widen(row[pos]);
  };
  for (int64_t j = 0; j < r.n_past; ++j) add(r.past_lo + j, x[j]);
  for (int64_t j = 0; j < r.n_new; ++j) add(r.offset + r.new_lo + j, x[r.n_past + j]);
}

template <typename T>
void AttendRow(const Job<T>& job, const RowOps<T>& ops, int b, int h, int s, std::vector<float>& x,
               std::vector<float>& qs) {
  const int D = job.D, H = job.p.heads, Hkv = job.p.kv_heads, kvh = h / (H / Hkv);
  float* y = job.y + ((static_cast<int64_t>(b) * H + h) * job.S + s) * D;
  std::fill(y, y + D, 0.f);
  const KeyRange r = KeysOf(job, b, s);
  if (!r.any) return;  // a row attending no key gives zeros, as in ORT
  const bool sinks = job.sink || job.p.smooth_softmax;
  const int64_t n = r.n_past + r.n_new;
  if (n == 0) {  // inconsistent lengths: what the composed softmax gives over -inf scores only
    if (!sinks) std::fill(y, y + D, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const T* q = job.q + ((static_cast<int64_t>(b) * H + h) * job.S + s) * D;
  for (int d = 0; d < D; ++d) qs[d] = Widen(q[d]) * job.p.scale;
  x.resize(n);
  const int64_t kv_row = static_cast<int64_t>(b) * Hkv + kvh;
  const int64_t past_at = (kv_row * job.P + r.past_lo) * D, new_at = (kv_row * job.S + r.new_lo) * D;
  if (r.n_past) ops.scores(qs.data(), job.past_k + past_at, r.n_past, D, x.data());
  if (r.n_new) ops.scores(qs.data(), job.k + new_at, r.n_new, D, x.data() + r.n_past);
  ShapeScores(job, b, h, s, r, x.data());
  const float sink = job.sink ? Widen(job.sink[h]) : 0.f;
  float max = sinks ? sink : -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  float sum = ops.exp_shift(x.data(), n, max);
  if (sinks) sum += ExpScalar(sink - max);
  if (r.n_past) ops.accumulate(x.data(), job.past_v + past_at, r.n_past, D, y);
  if (r.n_new) ops.accumulate(x.data() + r.n_past, job.v + new_at, r.n_new, D, y);
  const float inv = 1.f / sum;
  for (int d = 0; d < D; ++d) y[d] *= inv;
}

// Below this many multiply-adds one thread is faster than waking another (as in quantized_cpu.cc).
constexpr int64_t kMinParallelWork = 1 << 19;

template <typename T>
void Run(const Job<T>& job) {
  const RowOps<T> ops = ChooseOps<T>(job.D, job.p.portable);
  const int H = job.p.heads, tasks = job.B * H;
  int64_t keys = 0;  // an upper bound of the keys all rows of a head visit
  for (int b = 0; b < job.B; ++b)
    keys += std::clamp<int64_t>(static_cast<int64_t>(job.seqlens[b]) + 1, 0, job.P + job.S) * job.S;
  auto task = [&](int t) {
    thread_local std::vector<float> x, qs;
    qs.resize(job.D);
    for (int s = 0; s < job.S; ++s) AttendRow(job, ops, t / H, t % H, s, x, qs);
  };
  nbits_cpu::RunTasks(tasks, keys * H * job.D * 2, kMinParallelWork, task);
}

/** The primitive's inputs: q, k, v, seqlens_k, total, [past_k, past_v], [bias], [head_sink]. */
template <typename T>
void Compute(const std::vector<mx::array>& in, mx::array& out, const Params& p) {
  Job<T> job;
  job.p = p;
  job.B = in[0].shape(0);
  job.S = in[0].shape(2);
  job.D = in[0].shape(3);
  job.q = in[0].data<T>();
  job.k = in[1].data<T>();
  job.v = in[2].data<T>();
  job.seqlens = in[3].data<int32_t>();
  job.total = in[4].data<int32_t>()[0];
  size_t next = 5;
  if (p.has_past) {
    job.P = in[next].shape(2);
    job.past_k = in[next++].data<T>();
    job.past_v = in[next++].data<T>();
  }
  if (p.has_bias) {
    const mx::array& bias = in[next++];
    job.bias = bias.data<T>();
    job.bias_b = bias.shape(0);
    job.bias_h = bias.shape(1);
    job.bias_cols = bias.shape(3);
  }
  if (p.has_sink) job.sink = in[next++].data<T>();
  job.y = out.data<float>();
  Run(job);
}

class GqaAttentionCpu : public mx::UnaryPrimitive {
 public:
  GqaAttentionCpu(mx::Stream stream, Params p) : mx::UnaryPrimitive(stream), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(name(), stream(), inputs, out,
                      [p = p_](const std::vector<mx::array>& in, mx::array& y) {
                        switch (in[0].dtype()) {
                          case mx::float32:
                            return Compute<float>(in, y, p);
                          case mx::float16:
                            return Compute<mx::float16_t>(in, y, p);
                          default:
                            return Compute<mx::bfloat16_t>(in, y, p);
                        }
                      });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("GqaAttentionCpu runs on the CPU only (GPU streams compose MLX ops instead)");
  }

  const char* name() const override { return "GqaAttentionCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const GqaAttentionCpu&>(other).p_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  Params p_;
};

/** attention_bias as the kernel reads it: [B|1, H|1, S, columns <= L] (columns past its end are 0). */
void CheckBias(const OpContext& c, const mx::array& bias, const mx::array& q, int present_len) {
  if (bias.ndim() != 4 || bias.shape(2) != q.shape(2) || bias.shape(3) > present_len ||
      (bias.shape(0) != 1 && bias.shape(0) != q.shape(0)) ||
      (bias.shape(1) != 1 && bias.shape(1) != q.shape(1)))
    c.Fail("attention_bias must be [batch or 1, num_heads or 1, sequence, total_sequence_length]");
}

}  // namespace

bool Wanted(const OpContext& c) {
  if (RuntimeDevice() != mx::Device(mx::Device::cpu) || c.stream.device != mx::Device(mx::Device::cpu))
    return false;
  const std::string mode = EnvString(env::kGqaCpuKernel, "1");
  if (mode == "0" || mode == "off" || mode == "false") return false;
  if (EnvFlag(env::kVerbose))
    LogLine("GroupQueryAttention " + c.node.Label() +
            ": attention over the attended keys through the CPU kernel");
  return true;
}

KeyRange KeysOfRow(int32_t seqlen, int32_t total, int S, int s, int past, int present_len, int window) {
  const int64_t total_b = static_cast<int64_t>(seqlen) + 1;
  KeyRange r;
  r.offset = total == S ? 0 : total_b - S;  // the first prompt writes at 0
  const int64_t causal_end = r.offset + s + 1;
  const int64_t end = std::min(causal_end, total_b);
  const int64_t start = window > 0 ? causal_end - window : 0;
  r.any = start < end;
  const int64_t lo = std::max<int64_t>(start, 0);
  r.past_lo = lo;
  r.n_past = std::max<int64_t>(0, std::min({end, r.offset, static_cast<int64_t>(past)}) - lo);
  r.new_lo = std::max<int64_t>(lo - r.offset, 0);
  const int64_t new_hi = std::min({end - r.offset, static_cast<int64_t>(S), present_len - r.offset});
  r.n_new = std::max<int64_t>(0, new_hi - r.new_lo);
  return r;
}

bool StepWanted(const OpContext& c) { return EnvString(env::kGqaCpuKernel) != "core" && Wanted(c); }

bool PortableLoops() { return EnvString(env::kGqaCpuKernel) == "portable"; }

mx::array Attend(const OpContext& c, const Inputs& in, int present_len) {
  const mx::Stream s = c.stream;
  const Node& n = c.node;
  const mx::array& q = in.q;
  Params p;
  p.heads = q.shape(1);
  p.kv_heads = in.k.shape(1);
  p.present_len = present_len;
  p.window = static_cast<int>(n.AttrInt("local_window_size", -1));
  const float scale = n.AttrFloat("scale", 0.f);
  p.scale = scale == 0.f ? 1.f / std::sqrt(static_cast<float>(q.shape(3))) : scale;
  p.softcap = n.AttrFloat("softcap", 0.f);
  p.smooth_softmax = n.AttrInt("smooth_softmax", 0) == 1;
  p.portable = PortableLoops();
  // Any layout: DispatchCpuKernel copies an input that is not row-major when the kernel runs.
  std::vector<mx::array> inputs = {q, in.k, in.v, mx::reshape(in.seqlens_k, {q.shape(0)}, s),
                                   mx::reshape(in.total, {}, s)};
  if (in.past_k) {
    p.has_past = true;
    inputs.push_back(*in.past_k);
    inputs.push_back(*in.past_v);
  }
  if (in.bias) {
    CheckBias(c, *in.bias, q, present_len);
    p.has_bias = true;
    inputs.push_back(*in.bias);
  }
  if (in.head_sink) {
    if (in.head_sink->size() != static_cast<size_t>(p.heads)) c.Fail("head_sink must hold num_heads values");
    p.has_sink = true;
    inputs.push_back(mx::reshape(*in.head_sink, {-1}, s));
  }
  return mx::array(q.shape(), mx::float32, std::make_shared<GqaAttentionCpu>(s, p), std::move(inputs));
}

}  // namespace gqa_cpu
}  // namespace mlx_ep
