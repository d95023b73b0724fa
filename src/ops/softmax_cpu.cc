// The softmax primitive of unary_cpu.h on MLX's CPU stream: Softmax / LogSoftmax over the last
// axis in one pass a row, with the attention scores' scaling and mask in the same pass when the
// row's input is made of them ((s / k or s * k) + mask: a pass of MLX's of their own otherwise,
// 12% of the 4x128 BERT encoder's time with its broadcast mask), GPT-2's causal where(c, s / k,
// min) and second mask too (two strided compiled kernels of MLX's, 6.3% of gpt2_decoder's samples
// each).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/cpu_primitive.h"
#include "ops/exp_nonpositive.h"
#include "ops/quantized_cpu.h"
#include "ops/softmax_scores.h"
#include "ops/unary_cpu.h"

namespace mlx_ep {
namespace {

using nbits_cpu::kMinParallelValues;  // quantized_cpu.h

/** One row of n: Softmax (or LogSoftmax) as normalization.cc composes it, each step's value
 *  rounded where the composed form rounds it: the max, x - max in float32, e = e^(x - max) in
 *  float32 (ExpNonPositive), the sum of the e in double (the composed form's AccurateSum is within
 *  an ulp of it), e times 1 / sum rounded to float32 (log: (x - max) - log(sum) rounded once). A
 *  NaN anywhere in the row makes every output NaN, as the composed form's max does. */
MLX_EP_CLONES void SoftmaxRow(const float* x, float* y, int64_t n, bool log) {
  // Each pass a loop the compiler vectorizes: the max in sixteen float lanes, the e^ in float
  // lanes, the sum in eight double lanes, the scaling. A NaN is no lane's max (x > max is false),
  // but its e^ is NaN, so the sum is, and with it every output: the composed form's result.
  float lanes[16];
  std::fill(lanes, lanes + 16, -std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  for (; i < n; ++i) lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
  float m = lanes[0];
  for (int l = 1; l < 16; ++l) m = lanes[l] > m ? lanes[l] : m;
  for (i = 0; i < n; ++i) y[i] = ExpNonPositive(x[i] - m);
  double sum[8] = {};
  for (i = 0; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) sum[l] += static_cast<double>(y[i + l]);
  for (; i < n; ++i) sum[0] += y[i];
  const double total = ((sum[0] + sum[4]) + (sum[2] + sum[6])) + ((sum[1] + sum[5]) + (sum[3] + sum[7]));
  if (log) {
    const double log_total = std::log(total);
    for (i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - m) - log_total);
  } else {
    const float inverse = static_cast<float>(1.0 / total);  // total >= 1: the max's e is 1
    for (i = 0; i < n; ++i) y[i] *= inverse;
  }
}

/** A row's terms besides its scores (ScoreTerms): the scale's k, the select's condition and fill,
 *  the masks; each read pointer at the row's start with its step along the row (1, or 0 for one
 *  value a row), null where absent. */
struct RowTerms {
  ScoreTerms::Scale scale = ScoreTerms::Scale::kNone;
  float k = 1.0f;
  const bool* cond = nullptr;
  int64_t cond_step = 0;
  float fill = 0.0f;
  const float* mask = nullptr;
  int64_t mask_step = 0;
  const float* mask2 = nullptr;
  int64_t mask2_step = 0;
};

MLX_EP_CLONES void AddMask(float* t, const float* mask, int64_t step, int64_t n) {
  if (step == 1) {
    for (int64_t i = 0; i < n; ++i) t[i] += mask[i];
  } else {
    for (int64_t i = 0; i < n; ++i) t[i] += mask[0];
  }
}

/** t = the row's scores through its terms, in the composed form's order and float32 roundings:
 *  s / k or s * k, where(cond, that, fill), + mask, + mask2. */
MLX_EP_CLONES void ScoresRow(const float* s, const RowTerms& r, float* t, int64_t n) {
  if (r.scale == ScoreTerms::Scale::kDivide) {
    for (int64_t i = 0; i < n; ++i) t[i] = s[i] / r.k;
  } else if (r.scale == ScoreTerms::Scale::kMultiply) {
    for (int64_t i = 0; i < n; ++i) t[i] = s[i] * r.k;
  } else {
    std::memcpy(t, s, sizeof(float) * n);
  }
  if (r.cond && r.cond_step == 1) {
    for (int64_t i = 0; i < n; ++i) t[i] = r.cond[i] ? t[i] : r.fill;
  } else if (r.cond && !r.cond[0]) {
    std::fill(t, t + n, r.fill);
  }
  if (r.mask) AddMask(t, r.mask, r.mask_step, n);
  if (r.mask2) AddMask(t, r.mask2, r.mask2_step, n);
}

/** Where row `row` of `shape`'s rows (its last axis) starts in a row-major mask of `mask_shape`
 *  broadcast to `shape`, and the step along the row (1, or 0 for one value a row). */
class MaskRows {
 public:
  MaskRows(const mx::Shape& shape, const mx::Shape& mask_shape) : shape_(shape), strides_(shape.size(), 0) {
    const size_t rank = shape.size(), pad = rank - mask_shape.size();
    int64_t stride = 1;
    for (size_t d = rank; d-- > pad;) {
      if (mask_shape[d - pad] != 1) strides_[d] = stride;
      stride *= mask_shape[d - pad];
    }
    step = strides_.back();
  }

  int64_t Offset(int64_t row) const {
    int64_t offset = 0;
    for (size_t d = shape_.size() - 1; d-- > 0;) {
      offset += (row % shape_[d]) * strides_[d];
      row /= shape_[d];
    }
    return offset;
  }

  int64_t step = 0;

 private:
  mx::Shape shape_;
  std::vector<int64_t> strides_;
};

/** The rows of in[0] (then k, the select's condition and fill, the masks, as `terms` has them)
 *  into y. */
void SoftmaxRows(const std::vector<mx::array>& in, mx::array& y, bool log, ScoreTerms terms) {
  const int64_t n = in[0].shape(-1), rows = static_cast<int64_t>(in[0].size()) / n;
  const mx::Shape& shape = in[0].shape();
  const float* src = in[0].data<float>();
  float* dst = y.data<float>();
  size_t next = 1;
  RowTerms base;
  base.scale = terms.scale;
  if (terms.scale != ScoreTerms::Scale::kNone) base.k = in[next++].data<float>()[0];
  const mx::array* cond = terms.select ? &in[next] : nullptr;
  if (terms.select) base.fill = in[next + 1].data<float>()[0], next += 2;
  const mx::array* mask = terms.mask ? &in[next++] : nullptr;
  const mx::array* mask2 = terms.mask2 ? &in[next] : nullptr;
  const MaskRows cond_rows(shape, cond ? cond->shape() : mx::Shape{});
  const MaskRows mask_rows(shape, mask ? mask->shape() : mx::Shape{});
  const MaskRows mask2_rows(shape, mask2 ? mask2->shape() : mx::Shape{});
  base.cond_step = cond_rows.step, base.mask_step = mask_rows.step, base.mask2_step = mask2_rows.step;
  nbits_cpu::RunRanges(rows, rows * n, kMinParallelValues, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(terms.fused() ? n : 0);
    RowTerms r = base;
    for (int64_t row = begin; row < end; ++row) {
      const float* x = src + row * n;
      if (terms.fused()) {
        if (cond) r.cond = cond->data<bool>() + cond_rows.Offset(row);
        if (mask) r.mask = mask->data<float>() + mask_rows.Offset(row);
        if (mask2) r.mask2 = mask2->data<float>() + mask2_rows.Offset(row);
        ScoresRow(x, r, scores.data(), n);
        x = scores.data();
      }
      SoftmaxRow(x, dst + row * n, n, log);
    }
  });
}

class SoftmaxCpu : public mx::UnaryPrimitive {
 public:
  SoftmaxCpu(mx::Stream stream, bool log, ScoreTerms terms)
      : mx::UnaryPrimitive(stream), log_(log), terms_(terms) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(name(), stream(), inputs, out,
                      [log = log_, terms = terms_](const std::vector<mx::array>& in, mx::array& y) {
                        SoftmaxRows(in, y, log, terms);
                      });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("SoftmaxCpu runs on the CPU only");
  }

  const char* name() const override { return log_ ? "LogSoftmaxCpu" : "SoftmaxCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const SoftmaxCpu&>(other);
    return log_ == o.log_ && terms_ == o.terms_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  bool log_;
  ScoreTerms terms_;
};

}  // namespace

std::optional<mx::array> SoftmaxOnCpu(const mx::array& x, bool log, mx::Stream s) {
  static const bool off = EnvOff(env::kUnaryCpuKernel);
  if (off || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32 || x.ndim() == 0 ||
      x.shape(-1) == 0)
    return std::nullopt;
  ScoreTerms terms;
  std::vector<mx::array> inputs = ScoreInputs(x, terms, /*select_and_masks=*/true);
  return mx::array(x.shape(), mx::float32, std::make_shared<SoftmaxCpu>(s, log, terms), std::move(inputs));
}

}  // namespace mlx_ep
