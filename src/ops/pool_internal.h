// Helpers shared by the pooling family's files (pool.cc: windowed pools, pool_global.cc: global
// pools and MaxUnpool): attribute checks and the window geometry ORT's CPU kernels use, defined in
// pool_geometry.cc.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace pool {

/** Spatial dims ORT's CPU pooling kernels take (inputs of rank 3..5). */
inline constexpr int64_t kMaxSpatialDims = 3;

/** The pooling attributes of a node, with ONNX's defaults filled in. */
struct PoolAttrs {
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;  ///< [begin..., end...]
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
};

/** Reads the attributes (kernel_shape must be present). */
PoolAttrs ReadAttrs(const Node& n);

/** Why the pooling attributes of `v`'s node are not taken, or nullopt when they are (ORT rejects
 *  attributes an op version does not define, so none is checked against the version). `auto_pad`:
 *  whether the op has auto_pad (MaxUnpool has not). */
std::optional<std::string> AttrsReason(const NodeView& v, bool auto_pad = true);

/** Why input 0's rank is not taken (ORT pools 1-3 spatial dims), or nullopt. Unknown ranks pass
 *  (the translation checks them). */
std::optional<std::string> RankReason(const NodeView& v);

/** The window geometry along one spatial dim, resolved the way ORT's CPU kernels resolve it. */
struct Axis {
  int64_t in = 0;
  int64_t kernel = 1;
  int64_t stride = 1;
  int64_t dilation = 1;
  int64_t pad_begin = 0;  ///< negative only for SAME_* with kernel < stride (declined)
  int64_t pad_end = 0;
  int64_t out = 0;
  /** Input coordinate of window element `j` of output `o` (may lie outside [0, in)). */
  int64_t Coord(int64_t o, int64_t j) const { return o * stride - pad_begin + j * dilation; }
};

/** MaxPool without indices of float32 `x` (N, C, *S) over 1 or 2 spatial dims as one primitive of
 *  the EP's on MLX's CPU stream (ops/pool_cpu.cc), ORT's rule for windows with NaN or no inside
 *  element; nullopt elsewhere (other devices, dtypes or ranks) or with
 *  ONNXRUNTIME_EP_MLX_POOL_CPU_KERNEL=0 (the composed scan). */
std::optional<mx::array> MaxPoolOnCpu(const mx::array& x, const std::vector<Axis>& axes, mx::Stream s);

/** The geometry along spatial dim `i` for an input size `in`. */
Axis ResolveAxis(const PoolAttrs& a, size_t i, int64_t in);

/** Why the node is declined for its static input shape, or nullopt: where ORT's kernel gives
 *  another output size than its shape inference declares (SAME_* pads of a dilated kernel, a
 *  ceil_mode window dropped because it would start in the end padding), the output could not have
 *  ORT's declared static shape; where the dilated kernel is larger than the padded input, both are
 *  ill-defined; SAME_* pads that are (or, for a symbolic dim, may be) negative. */
std::optional<std::string> ShapeReason(const NodeView& v, const PoolAttrs& a);

/** The per-dim geometry of a pooling node over an input of shape `x` (N, C, spatial...); fails the
 *  translation on a bad rank, a negative output size or negative pads. */
std::vector<Axis> ResolveAxes(const OpContext& c, const PoolAttrs& a, const mx::Shape& x);

/** Fails the translation unless `x` (N, C, spatial...) has rank 3..5 and, when N > 0, no empty
 *  dim (ORT's rule: "Only N can be zero"). */
void CheckInput(const OpContext& c, const mx::array& x);

/** The lowest value of `dtype` (float, float16, bfloat16, double, int8, uint8): where ORT's MaxPool
 *  starts a window, what GlobalMaxPool gives for a channel of -inf. */
inline mx::array Lowest(mx::Dtype dtype) {
  switch (dtype) {
    case mx::int8:
      return mx::array(std::numeric_limits<int8_t>::lowest(), mx::int8);
    case mx::uint8:
      return mx::array(std::numeric_limits<uint8_t>::lowest(), mx::uint8);
    case mx::float16:
      return mx::array(-65504.0f, mx::float16);
    case mx::bfloat16:
      return mx::array(-3.38953139e38f, mx::bfloat16);
    case mx::float64:
      return mx::array(std::numeric_limits<double>::lowest(), mx::float64);
    default:
      return mx::array(std::numeric_limits<float>::lowest(), mx::float32);
  }
}

/** The dtype float pools compute in: float32 for float16/bfloat16 (as ORT's CPU EP), else the input's. */
inline mx::Dtype ComputeDtype(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16 ? mx::float32 : d; }

/** Checks input 0 against `types` and the runtime device, and the output type (same as input 0). */
inline std::optional<std::string> TypeReason0(const NodeView& v, std::initializer_list<ElemType> types) {
  if (!v.has_input(0)) return "input 0 is absent";
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, types)) return TypeReason(v, 0);
  if (!DeviceSupports(t)) return TypeReason(v, 0, "not supported on the MLX device");
  if (v.output_type(0) != t) return "output type differs from the input type";
  return std::nullopt;
}

}  // namespace pool

void RegisterGlobalPoolOps(OpRegistry& r);  // pool_global.cc, called by RegisterPoolOps

}  // namespace mlx_ep
