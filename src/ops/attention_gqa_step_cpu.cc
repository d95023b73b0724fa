// GroupQueryAttention's whole decode step on MLX's CPU device (attention_gqa_step.h): one
// primitive with three outputs, the CUDA kernel's counterpart (attention_gqa_cuda.cc).
//
// Why: a decode step's layer was ~25 MLX primitives around the attention core (the packed QKV's
// split, the rotation's views and kernels, MergeHeads, the rows' copies), each a task the EP's
// MLX thread builds and MLX's CPU stream runs (~6-7 µs apiece in the seventh session's profile of
// a Qwen2-0.5B int4 step). This primitive is one.
//
// Numerics: the CUDA kernel's rotation (float32, rounded to T), then GroupQueryAttention's CPU
// kernel's attention (attention_gqa_cpu.cc: q scaled before the dot products, its loops and exp),
// the output rounded once to T. Tasks: (batch, head) on the MatMulNBits kernels' pool when the
// step has enough work.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "mlx/primitives.h"
#include "mlx/types/half_types.h"
#include "ops/attention_gqa_cpu.h"
#include "ops/attention_gqa_cpu_loops.h"
#include "ops/attention_gqa_step.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"

namespace mlx_ep {
namespace {

using gqa_cpu::ChooseOps;
using gqa_cpu::RowOps;
using gqa_cpu::Widen;

/** The step's constants (PlanDecodeStep's, by name) and the loops' choice. */
struct StepParams {
  int heads = 0, kv_heads = 0, head_size = 0, past = 0, max_pos = 1, window = 0, pos_stride = 0, rot = 0;
  int q_stride = 0, q_off = 0, k_stride = 0, k_off = 0, v_stride = 0, v_off = 0;
  bool interleaved = false, portable = false;
  float scale = 1.f;
  bool operator==(const StepParams&) const = default;
};

StepParams ParamsOf(const KernelLaunch& plan, bool portable) {
  std::map<std::string, int> ints;
  StepParams p;
  for (const auto& [name, value] : plan.constants) {
    if (const int* i = std::get_if<int>(&value)) ints[name] = *i;
    if (const bool* b = std::get_if<bool>(&value); b && name == "INTERLEAVED") p.interleaved = *b;
  }
  p.heads = ints.at("H"), p.kv_heads = ints.at("HKV"), p.head_size = ints.at("D"), p.past = ints.at("P");
  p.max_pos = ints.at("MAXPOS"), p.window = ints.at("WINDOW"), p.pos_stride = ints.at("POS_STRIDE");
  p.rot = ints.at("ROT"), p.q_stride = ints.at("QS"), p.q_off = ints.at("QO"), p.k_stride = ints.at("KS");
  p.k_off = ints.at("KO"), p.v_stride = ints.at("VS"), p.v_off = ints.at("VO");
  const int32_t bits = ints.at("SCALE_BITS");
  std::memcpy(&p.scale, &bits, sizeof bits);
  p.portable = portable;
  return p;
}

/** Value d of row x rotated by cos/sin rows (c, s), as the CUDA kernel computes it. */
template <typename T>
T Rotated(const StepParams& p, const T* x, const T* c, const T* s, int d) {
  if (d >= p.rot) return x[d];
  const int half = p.rot / 2;
  const bool second = p.interleaved ? (d & 1) != 0 : d >= half;
  const int i = p.interleaved ? d / 2 : (second ? d - half : d);
  const float x1 = Widen(p.interleaved ? x[2 * i] : x[i]);
  const float x2 = Widen(p.interleaved ? x[2 * i + 1] : x[i + half]);
  const float co = Widen(c[i]), si = Widen(s[i]);
  return static_cast<T>(second ? x1 * si + x2 * co : x1 * co - x2 * si);
}

/** Entry b's step facts: the keys its row attends (gqa_cpu::KeysOfRow: its new row at `offset`,
 *  attended when n_new is 1) and its cos/sin rows' position. */
struct EntryFacts {
  gqa_cpu::KeyRange keys;
  int64_t pos = 0;
};

template <typename T>
struct StepJob {
  StepParams p;
  const T *q = nullptr, *k = nullptr, *v = nullptr, *past_k = nullptr, *past_v = nullptr;
  const T *cos = nullptr, *sin = nullptr;
  const int32_t* seqlens = nullptr;
  int32_t total = 0;
  const int64_t* pos_ids = nullptr;
  int B = 0;
  T *out = nullptr, *k_row = nullptr, *v_row = nullptr;
};

template <typename T>
EntryFacts FactsOf(const StepJob<T>& job, int b) {
  const StepParams& p = job.p;
  EntryFacts f;
  f.keys = gqa_cpu::KeysOfRow(job.seqlens[b], job.total, 1, 0, p.past, p.past, p.window);
  int64_t pos = f.keys.offset;
  if (p.pos_stride > 0)  // ORT reads position_ids[0, 0] on the first prompt
    pos = static_cast<int32_t>(job.total == 1 ? job.pos_ids[0]
                                              : job.pos_ids[static_cast<int64_t>(b) * p.pos_stride]);
  f.pos = std::clamp<int64_t>(pos, 0, p.max_pos - 1);
  return f;
}

/** Entry b's rotated K rows and V rows, [Hkv, D] each, into the outputs. */
template <typename T>
void NewRows(const StepJob<T>& job, int b, const EntryFacts& f) {
  const StepParams& p = job.p;
  const int D = p.head_size, half = p.rot / 2;
  const T* c = job.cos + f.pos * half;
  const T* s = job.sin + f.pos * half;
  for (int kvh = 0; kvh < p.kv_heads; ++kvh) {
    const T* k = job.k + static_cast<int64_t>(b) * p.k_stride + p.k_off + kvh * D;
    const T* v = job.v + static_cast<int64_t>(b) * p.v_stride + p.v_off + kvh * D;
    T* k_out = job.k_row + (static_cast<int64_t>(b) * p.kv_heads + kvh) * D;
    T* v_out = job.v_row + (static_cast<int64_t>(b) * p.kv_heads + kvh) * D;
    for (int d = 0; d < D; ++d) {
      k_out[d] = Rotated(p, k, c, s, d);
      v_out[d] = v[d];
    }
  }
}

/** Query head h of entry b: its output row (attention_gqa_cpu.cc's AttendRow for one row). */
template <typename T>
void AttendHead(const StepJob<T>& job, const RowOps<T>& ops, int b, int h, const EntryFacts& f,
                std::vector<float>& x, std::vector<float>& qs, std::vector<float>& y) {
  const StepParams& p = job.p;
  const int D = p.head_size, kvh = h / (p.heads / p.kv_heads);
  T* out = job.out + (static_cast<int64_t>(b) * p.heads + h) * D;
  const gqa_cpu::KeyRange& r = f.keys;
  const int64_t n_past = r.n_past, n = n_past + r.n_new;
  if (!r.any || n == 0) {  // no key: zeros, as in ORT; keys promised but none: the composed NaN
    std::fill(out, out + D, static_cast<T>(r.any ? std::numeric_limits<float>::quiet_NaN() : 0.f));
    return;
  }
  const int half = p.rot / 2;
  const T* q = job.q + static_cast<int64_t>(b) * p.q_stride + p.q_off + h * D;
  for (int d = 0; d < D; ++d)
    qs[d] = Widen(Rotated(p, q, job.cos + f.pos * half, job.sin + f.pos * half, d)) * p.scale;
  x.resize(n);
  std::fill(y.begin(), y.end(), 0.f);
  const int64_t kv_row = static_cast<int64_t>(b) * p.kv_heads + kvh;
  const int64_t past_at = (kv_row * p.past + r.past_lo) * D;
  if (n_past) ops.scores(qs.data(), job.past_k + past_at, n_past, D, x.data());
  if (r.n_new) ops.scores(qs.data(), job.k_row + kv_row * D, 1, D, x.data() + n_past);
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) max = std::max(max, x[j]);
  const float sum = ops.exp_shift(x.data(), n, max);
  if (n_past) ops.accumulate(x.data(), job.past_v + past_at, n_past, D, y.data());
  if (r.n_new) ops.accumulate(x.data() + n_past, job.v_row + kv_row * D, 1, D, y.data());
  const float inv = 1.f / sum;
  for (int d = 0; d < D; ++d) out[d] = static_cast<T>(y[d] * inv);
}

// Below this many multiply-adds one thread is faster than waking another (as in quantized_cpu.cc).
constexpr int64_t kMinParallelWork = 1 << 19;

template <typename T>
void RunStep(const StepJob<T>& job) {
  const StepParams& p = job.p;
  const RowOps<T> ops = ChooseOps<T>(p.head_size, p.portable);
  std::vector<EntryFacts> facts;
  int64_t keys = 0;
  for (int b = 0; b < job.B; ++b) {
    facts.push_back(FactsOf(job, b));
    NewRows(job, b, facts.back());  // before any head reads its entry's new K / V row
    keys += facts.back().keys.n_past + 1;
  }
  const int tasks = job.B * p.heads;
  auto task = [&](int t) {
    thread_local std::vector<float> x, qs, y;
    qs.resize(p.head_size);
    y.resize(p.head_size);
    AttendHead(job, ops, t / p.heads, t % p.heads, facts[t / p.heads], x, qs, y);
  };
  nbits_cpu::RunTasks(tasks, keys * p.heads * p.head_size * 2, kMinParallelWork, task);
}

/** The inputs in PlanDecodeStep's order: q, k, v, past_k, past_v, seqlens, total, cos, sin, ids. */
template <typename T>
void ComputeStep(const std::vector<mx::array>& in, std::vector<mx::array>& outs, const StepParams& p) {
  StepJob<T> job;
  job.p = p;
  job.B = in[0].shape(0);
  job.q = in[0].data<T>();
  job.k = in[1].data<T>();
  job.v = in[2].data<T>();
  job.past_k = in[3].data<T>();
  job.past_v = in[4].data<T>();
  job.seqlens = in[5].data<int32_t>();
  job.total = in[6].data<int32_t>()[0];
  if (p.rot > 0) {
    job.cos = in[7].data<T>();
    job.sin = in[8].data<T>();
  }
  if (p.pos_stride > 0) job.pos_ids = in[9].data<int64_t>();
  job.out = outs[0].data<T>();
  job.k_row = outs[1].data<T>();
  job.v_row = outs[2].data<T>();
  RunStep(job);
}

class GqaDecodeStepCpu : public mx::Primitive {
 public:
  GqaDecodeStepCpu(mx::Stream stream, StepParams p) : mx::Primitive(stream), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) override {
    DispatchCpuTask(stream(), inputs, outputs,
                    [p = p_](const std::vector<mx::array>& in, std::vector<mx::array>& out) {
                      switch (in[0].dtype()) {
                        case mx::float32:
                          return ComputeStep<float>(in, out, p);
                        case mx::float16:
                          return ComputeStep<mx::float16_t>(in, out, p);
                        default:
                          return ComputeStep<mx::bfloat16_t>(in, out, p);
                      }
                    });
  }

  void eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) override {
    throw std::runtime_error("GqaDecodeStepCpu runs on the CPU only (attention_gqa_cuda.cc is the GPU's)");
  }

  const char* name() const override { return "GqaDecodeStepCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const GqaDecodeStepCpu&>(other).p_;
  }

 private:
  StepParams p_;
};

}  // namespace

std::optional<GqaDecodeStep> DecodeStepOnCpu(const GqaDecodeStepInputs& in, bool portable, mx::Stream s) {
  if (s.device != mx::Device(mx::Device::cpu)) return std::nullopt;
  std::optional<KernelLaunch> plan = PlanDecodeStep(in);
  if (!plan) return std::nullopt;
  const std::vector<mx::array> outs =
      mx::array::make_arrays(plan->output_shapes, plan->output_dtypes,
                             std::make_shared<GqaDecodeStepCpu>(s, ParamsOf(*plan, portable)), plan->inputs);
  return GqaDecodeStep{outs[0], outs[1], outs[2]};
}

}  // namespace mlx_ep
