// The row-normalization primitive of normalization_cpu.h on MLX's CPU stream.
#include "ops/normalization_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"
#include "runtime/device.h"

namespace mlx_ep {
namespace {

struct NormParams {
  float eps = 0.f;
  bool simplified = false, has_bias = false;
  bool operator==(const NormParams&) const = default;
};

/** One row: the statistics in double, the values in float32 as ORT orders them. */
void NormalizeRow(const float* x, const float* w, const float* b, int64_t n, const NormParams& p, float* y) {
  double mean = 0.0;
  if (!p.simplified) {
    for (int64_t j = 0; j < n; ++j) mean += x[j];
    mean /= static_cast<double>(n);
  }
  double sq = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = x[j] - mean;
    sq += d * d;
  }
  const float m = static_cast<float>(mean);
  const float dev = static_cast<float>(std::sqrt(sq / static_cast<double>(n) + static_cast<double>(p.eps)));
  for (int64_t j = 0; j < n; ++j) {
    const float v = (p.simplified ? x[j] : x[j] - m) / dev * w[j];
    y[j] = b ? v + b[j] : v;
  }
}

using nbits_cpu::kMinParallelValues;  // quantized_cpu.h

class RowNormCpu : public mx::UnaryPrimitive {
 public:
  RowNormCpu(mx::Stream stream, NormParams p) : mx::UnaryPrimitive(stream), p_(p) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(
        name(), stream(), inputs, out, [p = p_](const std::vector<mx::array>& in, mx::array& y) {
          const int64_t n = in[0].shape(-1), rows = static_cast<int64_t>(in[0].size()) / n;
          const float *x = in[0].data<float>(), *w = in[1].data<float>();
          const float* b = p.has_bias ? in[2].data<float>() : nullptr;
          float* out = y.data<float>();
          nbits_cpu::RunRanges(rows, rows * n, kMinParallelValues, [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) NormalizeRow(x + r * n, w, b, n, p, out + r * n);
          });
        });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("RowNormCpu runs on the CPU only (GPUs take mx::fast's norms)");
  }

  const char* name() const override { return "RowNormCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    return p_ == static_cast<const RowNormCpu&>(other).p_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  NormParams p_;
};

}  // namespace

std::optional<mx::array> RowNormOnCpu(const mx::array& x, const mx::array& w,
                                      const std::optional<mx::array>& b, float eps, bool simplified,
                                      mx::Stream s) {
  static const bool off = EnvOff(env::kNormCpuKernel);
  if (off || s.device != mx::Device(mx::Device::cpu) || x.ndim() == 0 || x.dtype() != mx::float32)
    return std::nullopt;
  const int n = x.shape(-1);
  auto vector = [&](const mx::array& v) { return v.dtype() == mx::float32 && v.shape() == mx::Shape{n}; };
  if (n == 0 || x.size() == 0 || !vector(w) || (b && !vector(*b))) return std::nullopt;
  std::vector<mx::array> inputs = {x, w};
  if (b) inputs.push_back(*b);
  return mx::array(x.shape(), mx::float32,
                   std::make_shared<RowNormCpu>(s, NormParams{eps, simplified, b.has_value()}),
                   std::move(inputs));
}

}  // namespace mlx_ep
