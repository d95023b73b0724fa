// Op family: signal. HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix (17): tables that
// depend only on their scalar inputs, so they are computed on the host from those inputs' host values
// (constants, folded values, or graph inputs a partition specializes on) with ORT's CPU kernel's own
// C++ arithmetic (onnxruntime/core/providers/cpu/signal/window_functions.cc): the cosine sums in
// double (pi as ORT 1.31 has it; bit for bit against its output), the mel triangles with its float
// and size_t steps, each value converted to the output type by static_cast as ORT does. The table
// becomes a constant of the trace.
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

// The output types ORT's signal kernels dispatch over (output_datatype).
constexpr std::initializer_list<ElemType> kSignalTypes = {
    ElemType::kFloat, ElemType::kDouble, ElemType::kInt8,   ElemType::kInt16,  ElemType::kInt32,
    ElemType::kInt64, ElemType::kUInt8,  ElemType::kUInt16, ElemType::kUInt32, ElemType::kUInt64};

/** The node's output_datatype, or why not. */
std::string OutputType(const NodeView& v, ElemType& t) {
  t = static_cast<ElemType>(v.node().AttrInt("output_datatype", 1));
  if (!IsOneOf(t, kSignalTypes))
    return "output_datatype " + ElemName(t) + " (ORT's kernels write float, double, ints)";
  if (!DeviceSupports(t)) return "output_datatype " + ElemName(t) + " is not supported on the MLX device";
  return "";
}

/** Input `i`'s one float value (the mel edges). */
float FloatOf(const OpContext& c, size_t i) {
  const std::optional<double> v = c.known_scalar(i);
  if (!v) c.Fail("input " + std::to_string(i) + " must hold exactly one value");
  return static_cast<float>(*v);
}

/** An MLX array of `shape` holding the values `fill(T*)` writes, T the C++ type of `t`. */
template <class Fill>
mx::array HostTable(ElemType t, const mx::Shape& shape, Fill fill) {
  size_t count = 1;
  for (int d : shape) count *= static_cast<size_t>(d);
  auto make = [&](auto zero, mx::Dtype dtype) {
    using T = decltype(zero);
    std::vector<T> values(count, T{});
    fill(values.data());
    return mx::array(values.begin(), shape, dtype);
  };
  switch (t) {
    case ElemType::kFloat:
      return make(float{}, mx::float32);
    case ElemType::kDouble:
      return make(double{}, mx::float64);
    case ElemType::kInt8:
      return make(int8_t{}, mx::int8);
    case ElemType::kInt16:
      return make(int16_t{}, mx::int16);
    case ElemType::kInt32:
      return make(int32_t{}, mx::int32);
    case ElemType::kInt64:
      return make(int64_t{}, mx::int64);
    case ElemType::kUInt8:
      return make(uint8_t{}, mx::uint8);
    case ElemType::kUInt16:
      return make(uint16_t{}, mx::uint16);
    case ElemType::kUInt32:
      return make(uint32_t{}, mx::uint32);
    case ElemType::kUInt64:
      return make(uint64_t{}, mx::uint64);
    default:
      throw std::runtime_error("output type " + ElemName(t));
  }
}

// ---------------------------------------------------------------------------------------------
// Cosine-sum windows: w[i] = a0 - a1 cos(tau i / N) + a2 cos(2 tau i / N), N = size (periodic) or
// size - 1, in double, then static_cast to the output type.

Claim ClaimWindow(const NodeView& v) {
  if (std::optional<Claim> no = DeclineUnknownAttributes(v.node(), {"output_datatype", "periodic"}))
    return *no;
  ElemType t;
  if (std::string why = OutputType(v, t); !why.empty()) return Claim::No(why);
  if (!v.has_input(0) || !IsOneOf(v.input_type(0), {ElemType::kInt32, ElemType::kInt64}))
    return Claim::No("size must be an int32 or int64 scalar");
  return Claim::Yes({0});
}

std::vector<mx::array> Window(const OpContext& c, float a0, float a1, float a2) {
  const int64_t size = HostScalar(c, c.host(0), "size");
  if (size < 0 || size > std::numeric_limits<int32_t>::max()) c.Fail("size must be in [0, 2^31)");
  const bool periodic = c.node.AttrInt("periodic", 1) != 0;
  const auto t = static_cast<ElemType>(c.node.AttrInt("output_datatype", 1));
  return {HostTable(t, {static_cast<int>(size)}, [&](auto* y) {
    using T = std::remove_pointer_t<decltype(y)>;
    constexpr double pi = 3.14159265358979323846;  // ORT 1.31's (older ORT: 3.14159265)
    constexpr double tau = 2 * pi;
    const size_t n = static_cast<size_t>(size);
    const size_t denominator = periodic ? n : n - 1;
    const double angular_increment = tau / denominator;
    for (size_t i = 0; i < n; i++) {
      auto a2_component = a2 == 0 ? 0 : (a2 * cos(2 * angular_increment * i));
      y[i] = static_cast<T>(a0 - (a1 * cos(angular_increment * i)) + a2_component);
    }
  })};
}

std::vector<mx::array> TranslateHann(const OpContext& c) { return Window(c, .5f, .5f, 0.f); }

std::vector<mx::array> TranslateHamming(const OpContext& c) {
  const float a0 = 25.f / 46.f;
  return Window(c, a0, 1 - a0, 0.f);
}

std::vector<mx::array> TranslateBlackman(const OpContext& c) {
  const float alpha = .16f;
  const float a2 = alpha / 2.f;
  return Window(c, .5f - a2, .5f, a2);
}

// ---------------------------------------------------------------------------------------------
// MelWeightMatrix: [floor(dft_length / 2) + 1, num_mel_bins] triangles between mel-spaced bins.

Claim ClaimMelWeightMatrix(const NodeView& v) {
  if (std::optional<Claim> no = DeclineUnknownAttributes(v.node(), {"output_datatype"})) return *no;
  ElemType t;
  if (std::string why = OutputType(v, t); !why.empty()) return Claim::No(why);
  for (size_t i = 0; i < 5; ++i)
    if (!v.has_input(i)) return Claim::No("input " + std::to_string(i) + " is missing");
  for (size_t i = 0; i < 3; ++i)
    if (!IsOneOf(v.input_type(i), {ElemType::kInt32, ElemType::kInt64}))
      return Claim::No(TypeReason(v, i, "int32 or int64"));
  for (size_t i = 3; i < 5; ++i)
    if (v.input_type(i) != ElemType::kFloat) return Claim::No(TypeReason(v, i, "ORT takes float"));
  return Claim::Yes({0, 1, 2, 3, 4});
}

double HzToMel(double hz) { return 2595 * std::log10(1 + hz / 700); }
double MelToHz(double mels) { return 700 * (pow(10, (mels / 2595)) - 1); }

std::vector<mx::array> TranslateMelWeightMatrix(const OpContext& c) {
  const int64_t num_mel_bins = HostScalar(c, c.host(0), "num_mel_bins");
  const int64_t dft_length = HostScalar(c, c.host(1), "dft_length");
  const int64_t sample_rate = HostScalar(c, c.host(2), "sample_rate");
  const float lower_edge_hertz = FloatOf(c, 3), upper_edge_hertz = FloatOf(c, 4);
  if (num_mel_bins < 0 || dft_length < 0 || sample_rate <= 0)
    c.Fail("negative bins or length, or a rate <= 0");
  const int64_t num_spectrogram_bins = static_cast<int64_t>(std::floor(dft_length / 2 + 1));
  const auto lowest_index = std::floor(((dft_length + 1) * lower_edge_hertz) / sample_rate);
  const auto highest_index = std::floor(((dft_length + 1) * upper_edge_hertz) / sample_rate);
  if (!(lowest_index >= 0 && lowest_index < num_spectrogram_bins))
    c.Fail("lower_edge_hertz gives a mel filter bank out of range for dft_length and sample_rate (as ORT)");
  if (!(highest_index >= 0 && highest_index < num_spectrogram_bins))
    c.Fail("upper_edge_hertz gives a mel filter bank out of range for dft_length and sample_rate (as ORT)");
  if (num_spectrogram_bins * num_mel_bins > std::numeric_limits<int32_t>::max())
    c.Fail("the table is too large");
  // ORT's points may fall past the last bin (upper edges near the Nyquist rate): it would write
  // out of bounds there; we do not
  std::vector<size_t> frequency_bins(static_cast<size_t>(num_mel_bins) + 2);
  const auto low_frequency_mel = HzToMel(lower_edge_hertz);
  const auto high_frequency_mel = HzToMel(upper_edge_hertz);
  const auto mel_step = (high_frequency_mel - low_frequency_mel) / static_cast<float>(frequency_bins.size());
  for (size_t i = 0; i < frequency_bins.size(); i++) {
    const auto hz = MelToHz(low_frequency_mel + mel_step * i);
    frequency_bins[i] = static_cast<size_t>(std::floor(((dft_length + 1) * hz) / sample_rate));
    if (frequency_bins[i] >= static_cast<size_t>(num_spectrogram_bins))
      c.Fail("a mel point past the last bin");
  }
  const auto t = static_cast<ElemType>(c.node.AttrInt("output_datatype", 1));
  const mx::Shape shape = {static_cast<int>(num_spectrogram_bins), static_cast<int>(num_mel_bins)};
  return {HostTable(t, shape, [&](auto* y) {
    using T = std::remove_pointer_t<decltype(y)>;
    const auto bins = static_cast<size_t>(num_mel_bins);
    for (size_t i = 0; i < bins; i++) {
      const size_t lower = frequency_bins[i], center = frequency_bins[i + 1], higher = frequency_bins[i + 2];
      const size_t low_to_center = center - lower;
      if (low_to_center == 0) {
        y[center * bins + i] = static_cast<T>(1);
      } else {
        for (size_t j = lower; j <= center; j++)
          y[j * bins + i] = static_cast<T>((j - lower) / static_cast<T>(low_to_center));
      }
      const size_t center_to_high = higher - center;
      if (center_to_high > 0)
        for (size_t j = center; j < higher; j++)
          y[j * bins + i] = static_cast<T>((higher - j) / static_cast<T>(center_to_high));
    }
  })};
}

}  // namespace

void RegisterSignalOps(OpRegistry& r) {
  r.Add({"", "HannWindow", 17, 25, ClaimWindow, TranslateHann, HostEval::kFromValues});
  r.Add({"", "HammingWindow", 17, 25, ClaimWindow, TranslateHamming, HostEval::kFromValues});
  r.Add({"", "BlackmanWindow", 17, 25, ClaimWindow, TranslateBlackman, HostEval::kFromValues});
  r.Add(
      {"", "MelWeightMatrix", 17, 25, ClaimMelWeightMatrix, TranslateMelWeightMatrix, HostEval::kFromValues});
}

}  // namespace mlx_ep
