// AccurateSum (reduction_internal.h) of float32 values on MLX's CPU device as one primitive of the
// EP's, where the reduced axes are consecutive: the input is (outer, n, inner) in row-major order.
//
// The composed form moves the reduced axes last (a transpose, copied by the Reshape after it),
// zero-pads them to whole blocks (another copy), and sums twice through MLX's CPU reduction:
// 0.75 ms for the last axis of a (2, 512, 508) array and 1.3 ms for the middle one of (2, 512, 256)
// here, where ORT takes 0.02-0.04 ms. Here the values are read in place and summed in the same two
// stages (blocks of ~sqrt(n) values, then the block sums); a row's block in 16 independent lanes
// combined pairwise, a column's in order (test_reduction.py: within 1e-5 of ORT on rows and
// columns of 65,536 values).
#include "ops/reduction_cpu.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "common/env.h"
#include "mlx/primitives.h"
#include "ops/cpu_primitive.h"
#include "ops/quantized_cpu.h"
#include "ops/reduction_internal.h"

namespace mlx_ep {
namespace {

constexpr int kLanes = 16;
// Columns of (outer, n, inner) summed together (two 1 KiB arrays of sums on the stack).
constexpr int64_t kColumns = 256;
using nbits_cpu::kMinParallelValues;  // quantized_cpu.h

struct SumGeometry {
  int64_t outer = 1, n = 1, inner = 1;
  bool operator==(const SumGeometry&) const = default;
};

/** The block length of AccurateSum's two stages (reduction_internal.h); a sum of fewer than
 *  kTwoStageSumFrom values is one block, a chain in order: MLX's own sum on x86-64 (the same values
 *  as before this primitive). */
int64_t BlockOf(int64_t n) { return n < kTwoStageSumFrom ? n : TwoStageBlock(n); }

/** The sum of `len` consecutive values in order. */
MLX_EP_INLINE float ChainSum(const float* x, int64_t len) {
  float sum = 0.f;
  for (int64_t i = 0; i < len; ++i) sum += x[i];
  return sum;
}

/** The sum of `len` consecutive values: 16 lane sums, combined pairwise. */
MLX_EP_INLINE float LaneSum(const float* x, int64_t len) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += x[i + j];
  for (int j = 0; i < len; ++i, ++j) lanes[j] += x[i];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  return lanes[0];
}

/** Rows [begin, end) of (outer, n): each row's blocks, then their sums in order. A short row is
 *  one chain: total = 0 + chain, its value exactly. */
MLX_EP_CLONES void SumRows(const float* x, const SumGeometry& g, int64_t begin, int64_t end, float* y) {
  const int64_t block = BlockOf(g.n);
  const bool lanes = g.n >= kTwoStageSumFrom;  // a block in 16 lanes; a short row one chain
  for (int64_t o = begin; o < end; ++o) {
    const float* row = x + o * g.n;
    float total = 0.f;
    for (int64_t b = 0; b < g.n; b += block) {
      const int64_t len = std::min(block, g.n - b);
      total += lanes ? LaneSum(row + b, len) : ChainSum(row + b, len);
    }
    y[o] = total;
  }
}

/** Columns [k0, k0 + width) of one outer index of (outer, n, inner): the rows of a block added
 *  column-wise (each column its own chain), then the block sums in order. */
MLX_EP_CLONES void SumColumns(const float* x, const SumGeometry& g, int64_t o, int64_t k0, int64_t width, float* y) {
  float total[kColumns] = {}, part[kColumns];
  const float* base = x + o * g.n * g.inner + k0;
  const int64_t block = BlockOf(g.n);
  for (int64_t b = 0; b < g.n; b += block) {
    std::fill(part, part + width, 0.f);
    for (int64_t i = b; i < std::min(g.n, b + block); ++i) {
      const float* row = base + i * g.inner;
      for (int64_t k = 0; k < width; ++k) part[k] += row[k];
    }
    for (int64_t k = 0; k < width; ++k) total[k] += part[k];
  }
  std::copy(total, total + width, y + o * g.inner + k0);
}

class SumCpu : public mx::UnaryPrimitive {
 public:
  SumCpu(mx::Stream stream, SumGeometry g, int first_axis, int last_axis)
      : mx::UnaryPrimitive(stream), g_(g), first_axis_(first_axis), last_axis_(last_axis) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    DispatchCpuKernel(name(), stream(), inputs, out, [g = g_](const std::vector<mx::array>& in, mx::array& y) {
      const float* x = in[0].data<float>();
      float* dst = y.data<float>();
      const int64_t values = g.outer * g.n * g.inner;
      if (g.inner == 1) {
        nbits_cpu::RunRanges(g.outer, values, kMinParallelValues,
                             [&](int64_t begin, int64_t end) { SumRows(x, g, begin, end, dst); });
        return;
      }
      const int64_t chunks = (g.inner + kColumns - 1) / kColumns;
      nbits_cpu::RunRanges(g.outer * chunks, values, kMinParallelValues, [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t o = item / chunks, k0 = item % chunks * kColumns;
          SumColumns(x, g, o, k0, std::min(kColumns, g.inner - k0), dst);
        }
      });
    });
  }

  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error("SumCpu runs on the CPU only (GPUs take MLX's sum)");
  }

  const char* name() const override { return "SumCpu"; }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto& o = static_cast<const SumCpu&>(other);
    return g_ == o.g_ && first_axis_ == o.first_axis_ && last_axis_ == o.last_axis_;
  }

  std::vector<mx::Shape> output_shapes(const std::vector<mx::array>& inputs) override {
    mx::Shape shape = inputs[0].shape();
    for (int d = first_axis_; d <= last_axis_; ++d) shape[d] = 1;
    return {shape};
  }

 private:
  SumGeometry g_;
  int first_axis_, last_axis_;  ///< the reduced axes, kept as 1s
};

}  // namespace

std::optional<mx::array> AccurateSumOnCpu(const mx::array& x, const std::vector<int>& axes, mx::Stream s) {
  static const bool off = EnvOff(env::kReduceCpuKernel);
  if (off || s.device != mx::Device(mx::Device::cpu) || x.dtype() != mx::float32 || axes.empty()) return std::nullopt;
  // Sorted, unique and consecutive: (outer, n, inner).
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] < 0 || axes[i] >= static_cast<int>(x.ndim()) || (i > 0 && axes[i] != axes[i - 1] + 1))
      return std::nullopt;
  SumGeometry g;
  mx::Shape shape = x.shape();
  for (int d = 0; d < static_cast<int>(x.ndim()); ++d) {
    if (d < axes.front())
      g.outer *= x.shape(d);
    else if (d > axes.back())
      g.inner *= x.shape(d);
    else {
      g.n *= x.shape(d);
      shape[d] = 1;
    }
  }
  if (g.outer * g.inner == 0 || g.n == 0) return std::nullopt;  // MLX's sum: nothing, or zeros
  return mx::array(shape, mx::float32, std::make_shared<SumCpu>(s, g, axes.front(), axes.back()), {x});
}

}  // namespace mlx_ep
