// The exp/sigmoid/tanh/erf primitive of unary_cpu.h on MLX's CPU stream.
#include "ops/unary_cpu.h"

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
#include "ops/quantized_cpu.h"

// The loops are MLX_EP_CLONES (cpu_primitive.h): every clone computes the same double-precision
// values; FMA only rounds less.

namespace mlx_ep {
namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
// 1/k!, k = 0..9: e^r for |r| <= ln2/2 to 2e-10 relative, far below float32's half ulp (3e-8).
constexpr double kTaylor[] = {1.0,       1.0,       0.5,        1.0 / 6,     1.0 / 24,
                              1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880};

/** e^x for double x (NaN passes through). Clamped to [-700, 700], where e^x is a normal double,
 *  0 or inf once rounded to float32 beyond; n = round(x / ln2), e^x = 2^n e^r with r = x - n ln2,
 *  and 2^n from the bits of x / ln2 + 1.5 * 2^52, whose low bits hold n (integer operations only,
 *  so that the loops vectorize). */
MLX_EP_INLINE double ExpClamped(double x) {
  x = x < -700.0 ? -700.0 : x;
  x = x > 700.0 ? 700.0 : x;
  const double shifted = x * kLog2e + kShifter;
  const double n = shifted - kShifter;
  const double r = x - n * kLn2;
  double p = kTaylor[9];
  for (int k = 8; k >= 0; --k) p = p * r + kTaylor[k];
  uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  bits = (bits + 1023) << 52;  // the exponent field of 2^n
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

MLX_EP_CLONES void ExpRange(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(ExpClamped(x[i]));
}

/** sigmoid(v) rounded to float32: 1 / (1 + e) for v >= 0, e / (1 + e) below, with e = e^-|v| in
 *  (0, 1]. */
MLX_EP_INLINE float SigmoidOf(double v) {
  const double e = ExpClamped(v < 0 ? v : -v);
  return static_cast<float>((v >= 0 ? 1.0 : e) / (1.0 + e));
}

MLX_EP_CLONES void SigmoidRange(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = SigmoidOf(x[i]);
}

/** x * sigmoid(x): SigmoidRange's value, times x in float32 (Mul's step). */
MLX_EP_CLONES void SiluRange(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * SigmoidOf(x[i]);
}

// tanh's Taylor coefficients, x^1 ... x^9 (odd powers): below |x| = 1/16 the next term is 8e-15
// relative, where 1 - 2 / (e^2|x| + 1) would cancel most of double's bits for tiny |x|.
constexpr double kTanhTaylor[] = {1.0, -1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835};

MLX_EP_CLONES void TanhRange(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double a = v < 0 ? -v : v;
    const double a2 = a * a;
    double poly = kTanhTaylor[4];
    for (int k = 3; k >= 0; --k) poly = poly * a2 + kTanhTaylor[k];
    const double small = a * poly;
    const double large = 1.0 - 2.0 / (ExpClamped(2.0 * a) + 1.0);  // NaN stays NaN
    const double t = a < 0.0625 ? small : large;
    y[i] = static_cast<float>(v < 0 ? -t : t);
  }
}

// unary::Erf's rational function (src/ops/unary.cc: Eigen's/XLA's fit, x * P(x^2) / Q(x^2) on x
// clamped to [-4, 4]), in double precision as it evaluates it on MLX's CPU device, in the same
// Estrin form; FMA may round less.
constexpr double kErfP[] = {-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04,
                            -5.69250639462346e-05, -2.10102402082508e-06, 2.77068142495902e-08,
                            -2.72614225801306e-10};
constexpr double kErfQ[] = {-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03,
                            -2.13374055278905e-04, -1.45660718464996e-05};

MLX_EP_INLINE double ErfRational(double x) {
  const double xc = x < -4.0 ? -4.0 : x > 4.0 ? 4.0 : x;  // NaN stays NaN
  const double y = xc * xc, y2 = y * y, y4 = y2 * y2;
  const double p = (y2 * kErfP[6] + (y * kErfP[5] + kErfP[4])) * y4 +
                   ((y * kErfP[3] + kErfP[2]) * y2 + (y * kErfP[1] + kErfP[0]));
  const double q = y4 * kErfQ[4] + ((y * kErfQ[3] + kErfQ[2]) * y2 + (y * kErfQ[1] + kErfQ[0]));
  return xc * (p / q);  // x * (P / Q): (x * P) / Q underflows for subnormal x
}

MLX_EP_CLONES void ErfRange(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(ErfRational(x[i]));
}

/** GeluErf's steps (activation_contrib.cc, ORT's order) in float32 around the erf. */
MLX_EP_CLONES void GeluErfRange(const float* x, float* y, int64_t n) {
  constexpr float kSqrtHalf = static_cast<float>(M_SQRT1_2);
  for (int64_t i = 0; i < n; ++i) {
    const float e = static_cast<float>(ErfRational(x[i] * kSqrtHalf));
    y[i] = (x[i] * 0.5f) * (e + 1.0f);
  }
}

using nbits_cpu::kMinParallelValues;  // quantized_cpu.h

using RangeFn = void (*)(const float*, float*, int64_t);

/** A form's loop and the primitive's name for it. */
struct FormInfo {
  RangeFn range;
  const char* name;
};

FormInfo InfoOf(ExpForm form) {
  switch (form) {
    case ExpForm::kExp:
      return {ExpRange, "ExpCpu"};
    case ExpForm::kSigmoid:
      return {SigmoidRange, "SigmoidCpu"};
    case ExpForm::kTanh:
      return {TanhRange, "TanhCpu"};
    case ExpForm::kErf:
      return {ErfRange, "ErfCpu"};
    case ExpForm::kGeluErf:
      return {GeluErfRange, "GeluErfCpu"};
    case ExpForm::kSilu:
      return {SiluRange, "SiluCpu"};
  }
  return {ExpRange, "ExpCpu"};
}

class ExpCpu : public mx::UnaryPrimitive {
 public:
  ExpCpu(mx::Stream stream, ExpForm form) : mx::UnaryPrimitive(stream), form_(form) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(
        name(), stream(), inputs, out, [form = form_](const std::vector<mx::array>& in, mx::array& y) {
          const int64_t n = static_cast<int64_t>(y.size());
          const float* src = in[0].data<float>();
          float* dst = y.data<float>();
          nbits_cpu::RunRanges(
              n, n, kMinParallelValues,
              [&](int64_t begin, int64_t end) { InfoOf(form).range(src + begin, dst + begin, end - begin); },
              /*grain=*/4096);
        });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("ExpCpu runs on the CPU only (GPUs take MLX's exp, sigmoid, tanh and erf)");
  }

  const char* name() const override { return InfoOf(form_).name; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return form_ == static_cast<const ExpCpu&>(other).form_;
  }

  ExpForm form() const { return form_; }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  ExpForm form_;
};

}  // namespace

std::optional<mx::array> ExpOnCpu(const mx::array& x, ExpForm form, mx::Stream s) {
  static const bool off = EnvOff(env::kUnaryCpuKernel);
  if (off || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32) return std::nullopt;
  return mx::array(x.shape(), mx::float32, std::make_shared<ExpCpu>(s, form), {x});
}

void ExpFormValues(ExpForm form, const float* x, float* y, int64_t n) { InfoOf(form).range(x, y, n); }

std::optional<mx::array> SiluOnCpu(const mx::array& a, const mx::array& b, mx::Stream s) {
  // `sig` is ExpCpu's sigmoid of `x` itself (the same array, not an equal one).
  auto sigmoid_of = [](const mx::array& sig, const mx::array& x) {
    if (!sig.has_primitive() || sig.inputs().size() != 1 || sig.inputs()[0].id() != x.id()) return false;
    const auto* p = dynamic_cast<const ExpCpu*>(&sig.primitive());
    return p && p->form() == ExpForm::kSigmoid;
  };
  if (sigmoid_of(b, a)) return ExpOnCpu(a, ExpForm::kSilu, s);
  if (sigmoid_of(a, b)) return ExpOnCpu(b, ExpForm::kSilu, s);
  return std::nullopt;
}

}  // namespace mlx_ep
