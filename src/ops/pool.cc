// Op family: pooling. MaxPool (with Indices), AveragePool, LpPool here; GlobalAveragePool,
// GlobalMaxPool, GlobalLpPool and MaxUnpool in pool_global.cc; attributes and window geometry in
// pool_geometry.cc.
//
// Semantics are those of ORT 1.23's CPU kernels (measured against them, see tests/python/ops/
// test_pool.py), which differ from a textbook pool in places:
//  - Output size: floor mode is (in + pads - dilation*(kernel-1) - 1) / stride + 1 in C++ integer
//    division; ceil mode rounds up and then drops the last window when it would start at or past
//    in + pad_begin. SAME_UPPER/SAME_LOWER pads come from the undilated kernel,
//    (ceil(in/stride)-1)*stride + kernel - in, halved with C++ truncation.
//  - ORT's shape inference does not follow its kernel in two of these points (the dropped ceil_mode
//    window, SAME_* pads of a dilated kernel): where the sizes differ the output could not have
//    the static shape ORT declares, and the node is declined (see ShapeReason); with symbolic
//    input dims nothing is declared and MLX follows the kernel. SAME_* pads of a kernel smaller
//    than the stride can be negative, which ORT's kernels handle inconsistently: declined.
//  - MaxPool: a window's value is its first element inside the input, then replaced by each later
//    element (row-major window order) that compares greater. Ties keep the first; a NaN first
//    element stays, later NaNs are ignored; an empty window gives the type's lowest value and the
//    index of coordinates (-1, ..., -1). Indices flatten (n, c, spatial) row-major, the spatial
//    part column-major for storage_order=1. (ORT's float32 single-output fast path, MLAS,
//    differs from this only for windows of NaN or -inf values, and not consistently across its
//    own kernels.)
//  - AveragePool: a window sums its elements inside the input; the divisor is their count, or with
//    count_include_pad the number of window elements before in + pad_end (a ceil_mode window
//    running past the end padding counts only up to it). Windows with no element inside give 0.
//  - LpPool: (sum over the window's elements inside the input of |x|^p)^(1/p).
//  - float16/bfloat16 compute in float32 and round once (as ORT's float16 kernels do).
//
// Windows are built by slicing: window element j of every output is one strided slice of the
// padded input, and the reduction runs over the slices in row-major window order. This keeps ORT's
// order of accumulation, its first-wins argmax, and memory at one output-sized array per step
// (a strided window view would materialize output x kernel elements for the reduction).
#include <limits>

#include "ops/pool_internal.h"

namespace mlx_ep {
namespace {

using pool::Axis;

/** (N, C, out...) of a pool over `x`. */
mx::Shape OutShape(const mx::array& x, const std::vector<Axis>& axes) {
  mx::Shape s = {x.shape(0), x.shape(1)};
  for (const Axis& ax : axes) s.push_back(static_cast<int32_t>(ax.out));
  return s;
}

/** `x` padded with zeros so that every window element of every output lies inside it (window
 *  element j of output o is then at padded index o * stride + j * dilation). */
mx::array PadForWindows(const mx::array& x, const std::vector<Axis>& axes, mx::Stream s) {
  std::vector<int> dims;
  mx::Shape low, high;
  bool any = false;
  for (size_t i = 0; i < axes.size(); ++i) {
    const Axis& ax = axes[i];
    const int64_t end = ax.Coord(ax.out - 1, ax.kernel - 1) + 1;  // past the last element read
    const int64_t hi = std::max<int64_t>(end - ax.in, 0);
    dims.push_back(static_cast<int>(i) + 2);
    low.push_back(static_cast<int32_t>(ax.pad_begin));
    high.push_back(static_cast<int32_t>(hi));
    any = any || ax.pad_begin > 0 || hi > 0;
  }
  return any ? mx::pad(x, dims, low, high, mx::array(0, x.dtype()), "constant", s) : x;
}

/** Window element `offs` (per-dim kernel offsets) of every output: one strided slice of the padded input. */
mx::array WindowSlice(const mx::array& padded, const std::vector<Axis>& axes,
                      const std::vector<int64_t>& offs, mx::Stream s) {
  mx::Shape start = {0, 0}, stop = {padded.shape(0), padded.shape(1)}, strides = {1, 1};
  for (size_t i = 0; i < axes.size(); ++i) {
    const Axis& ax = axes[i];
    const int64_t first = offs[i] * ax.dilation;
    start.push_back(static_cast<int32_t>(first));
    stop.push_back(static_cast<int32_t>(first + (ax.out - 1) * ax.stride + 1));
    strides.push_back(static_cast<int32_t>(ax.stride));
  }
  return mx::slice(padded, start, stop, strides, s);
}

/** Advances per-dim kernel offsets in row-major order; false after the last. */
bool NextOffset(std::vector<int64_t>& offs, const std::vector<Axis>& axes) {
  for (size_t i = axes.size(); i-- > 0;) {
    if (++offs[i] < axes[i].kernel) return true;
    offs[i] = 0;
  }
  return false;
}

/** A 1-D host vector as an array laid along spatial dim `i` of (1, 1, out...). */
template <typename T>
mx::array AlongDim(const std::vector<T>& v, size_t i, size_t nd, mx::Dtype dtype) {
  mx::Shape shape(nd + 2, 1);
  shape[i + 2] = static_cast<int32_t>(v.size());
  return mx::array(v.begin(), shape, dtype);
}

/** True when no output has window element `offs` inside [0, in) along some dim (it reads padding only). */
bool OnlyPadding(const std::vector<Axis>& axes, const std::vector<int64_t>& offs) {
  for (size_t i = 0; i < axes.size(); ++i) {
    bool any = false;
    for (int64_t o = 0; o < axes[i].out && !any; ++o) {
      const int64_t q = axes[i].Coord(o, offs[i]);
      any = q >= 0 && q < axes[i].in;
    }
    if (!any) return true;
  }
  return false;
}

/** Which outputs have window element `offs` inside [0, in) on every dim, shape (1, 1, out...);
 *  nullopt when all do. */
std::optional<mx::array> InsideMask(const std::vector<Axis>& axes, const std::vector<int64_t>& offs,
                                    mx::Stream s) {
  std::optional<mx::array> mask;
  for (size_t i = 0; i < axes.size(); ++i) {
    const Axis& ax = axes[i];
    std::vector<uint8_t> inside(ax.out);
    bool all = true;
    for (int64_t o = 0; o < ax.out; ++o) {
      const int64_t q = ax.Coord(o, offs[i]);
      inside[o] = q >= 0 && q < ax.in;
      all = all && inside[o];
    }
    if (all) continue;
    const mx::array m = AlongDim(inside, i, axes.size(), mx::bool_);
    mask = mask ? mx::logical_and(*mask, m, s) : m;
  }
  return mask;
}

/** Spatial pitches of the input for flattened indices: row-major, or column-major (storage_order 1). */
std::vector<int64_t> Pitches(const std::vector<Axis>& axes, bool column_major) {
  const size_t nd = axes.size();
  std::vector<int64_t> pitch(nd, 1);
  if (column_major) {
    for (size_t i = 1; i < nd; ++i) pitch[i] = pitch[i - 1] * axes[i - 1].in;
  } else {
    for (size_t i = nd - 1; i-- > 0;) pitch[i] = pitch[i + 1] * axes[i + 1].in;
  }
  return pitch;
}

/** Spatial flat index of window element 0 of every output, shape (1, 1, out...), int64. */
mx::array WindowOrigins(const std::vector<Axis>& axes, const std::vector<int64_t>& pitch, mx::Stream s) {
  std::optional<mx::array> sum;
  for (size_t i = 0; i < axes.size(); ++i) {
    std::vector<int64_t> v(axes[i].out);
    for (int64_t o = 0; o < axes[i].out; ++o) v[o] = axes[i].Coord(o, 0) * pitch[i];
    const mx::array a = AlongDim(v, i, axes.size(), mx::int64);
    sum = sum ? mx::add(*sum, a, s) : a;
  }
  return *sum;
}

/** The running state of a max-pool scan: value and (optional) spatial flat index per output. */
struct MaxScan {
  mx::array best;
  std::optional<mx::array> index;
  std::optional<mx::array> seen;  ///< outputs that have had an inside element (nullopt: all have)
};

/** Folds window element `offs` into `scan` the way ORT's loop does: take it when it is inside and
 *  either the first inside element or greater than the value so far. */
void ScanElement(MaxScan& scan, const mx::array& xj, const std::optional<mx::array>& inside,
                 const std::optional<mx::array>& index_j, mx::Stream s) {
  mx::array take = mx::greater(xj, scan.best, s);
  if (scan.seen) take = mx::logical_or(mx::logical_not(*scan.seen, s), take, s);
  if (inside) take = mx::logical_and(*inside, take, s);
  if (scan.seen) {
    if (inside)
      scan.seen = mx::logical_or(*scan.seen, *inside, s);
    else
      scan.seen.reset();  // every output has now had an inside element
  }
  scan.best = mx::where(take, xj, scan.best, s);
  if (scan.index) scan.index = mx::where(take, *index_j, *scan.index, s);
}

std::vector<mx::array> WindowMax(const OpContext& c, const mx::array& x, const std::vector<Axis>& axes,
                                 bool want_indices, bool column_major) {
  const mx::Stream s = c.stream;
  const mx::Shape out_shape = OutShape(x, axes);
  const size_t nd = axes.size();
  const std::vector<int64_t> pitch = Pitches(axes, column_major);
  int64_t empty_index = 0;  // coordinates (-1, ..., -1), as ORT reports an empty window
  for (int64_t p : pitch) empty_index -= p;

  MaxScan scan{mx::full(out_shape, pool::Lowest(x.dtype()), s), std::nullopt,
               mx::zeros(mx::Shape(nd + 2, 1), mx::bool_, s)};
  std::optional<mx::array> origins;
  if (want_indices) {
    scan.index = mx::full(out_shape, mx::array(empty_index, mx::int64), s);
    origins = WindowOrigins(axes, pitch, s);
  }
  const mx::array padded = PadForWindows(x, axes, s);
  std::vector<int64_t> offs(nd, 0);
  do {
    if (OnlyPadding(axes, offs)) continue;
    const std::optional<mx::array> inside = InsideMask(axes, offs, s);
    const mx::array xj = WindowSlice(padded, axes, offs, s);
    std::optional<mx::array> index_j;
    if (want_indices) {
      int64_t rel = 0;
      for (size_t i = 0; i < nd; ++i) rel += offs[i] * axes[i].dilation * pitch[i];
      index_j = mx::add(*origins, mx::array(rel, mx::int64), s);
    }
    ScanElement(scan, xj, inside, index_j, s);
  } while (NextOffset(offs, axes));

  std::vector<mx::array> outs = {scan.best};
  if (want_indices) {
    // Batch and channel part: (n * C + c) * spatial size.
    int64_t spatial = 1;
    for (const Axis& ax : axes) spatial *= ax.in;
    const int64_t nc = static_cast<int64_t>(x.shape(0)) * x.shape(1);
    mx::Shape nc_shape(nd + 2, 1);
    nc_shape[0] = x.shape(0);
    nc_shape[1] = x.shape(1);
    const mx::array base =
        mx::reshape(mx::multiply(mx::arange(0.0, static_cast<double>(nc), 1.0, mx::int64, s),
                                 mx::array(spatial, mx::int64), s),
                    nc_shape, s);
    outs.push_back(mx::add(*scan.index, base, s));
  }
  return outs;
}

// ---- AveragePool / LpPool ----------------------------------------------------------------------

/** The divisor of every AveragePool output, shape (1, 1, out...): per dim the number of window
 *  elements inside the input, or with count_include_pad those before in + pad_end (ORT's capped
 *  window end). Windows without an inside element sum to 0 and get divisor 1 (ORT outputs 0). */
mx::array AverageDivisor(const std::vector<Axis>& axes, bool include_pad, mx::Dtype dtype, mx::Stream s) {
  std::optional<mx::array> product;
  for (size_t i = 0; i < axes.size(); ++i) {
    const Axis& ax = axes[i];
    std::vector<double> div(ax.out);
    for (int64_t o = 0; o < ax.out; ++o) {
      int64_t inside = 0;
      for (int64_t j = 0; j < ax.kernel; ++j) {
        const int64_t q = ax.Coord(o, j);
        inside += q >= 0 && q < ax.in;
      }
      const int64_t start = ax.Coord(o, 0);
      const int64_t end = std::min(start + ax.kernel * ax.dilation, ax.in + ax.pad_end);
      const int64_t counted = include_pad ? 1 + (end - start - 1) / ax.dilation : inside;
      div[o] = inside == 0 ? 1.0 : static_cast<double>(counted);
    }
    const mx::array d = AlongDim(div, i, axes.size(), dtype);
    product = product ? mx::multiply(*product, d, s) : d;
  }
  return *product;
}

/** Sum over every window of `term(element)`, in ORT's row-major window order; zero padding adds 0. */
template <typename Term>
mx::array WindowSum(const mx::array& x, const std::vector<Axis>& axes, Term term, mx::Stream s) {
  const mx::array padded = PadForWindows(x, axes, s);
  std::vector<int64_t> offs(axes.size(), 0);
  std::optional<mx::array> sum;
  do {
    if (OnlyPadding(axes, offs)) continue;  // adds 0 everywhere
    const mx::array t = term(WindowSlice(padded, axes, offs, s));
    sum = sum ? mx::add(*sum, t, s) : t;
  } while (NextOffset(offs, axes));
  return sum ? *sum : mx::zeros(OutShape(x, axes), x.dtype(), s);
}

/** Input 0 converted to the compute dtype, its resolved axes, and whether the output is empty. */
struct FloatPoolInput {
  mx::array x;
  std::vector<Axis> axes;
  bool empty;
};

FloatPoolInput PrepareFloatPool(const OpContext& c) {
  const mx::array& x = c.input(0);
  pool::CheckInput(c, x);
  std::vector<Axis> axes = pool::ResolveAxes(c, pool::ReadAttrs(c.node), x.shape());
  const mx::array xc = mx::astype(x, pool::ComputeDtype(x.dtype()), c.stream);
  int64_t size = static_cast<int64_t>(x.shape(0)) * x.shape(1);
  for (const Axis& ax : axes) size *= ax.out;
  return {xc, std::move(axes), size == 0};
}

std::vector<mx::array> TranslateAveragePool(const OpContext& c) {
  const mx::Stream s = c.stream;
  const FloatPoolInput in = PrepareFloatPool(c);
  const mx::Dtype out_dtype = c.output_dtype(0);
  if (in.empty) return {mx::zeros(OutShape(in.x, in.axes), out_dtype, s)};
  const bool include_pad = c.node.AttrInt("count_include_pad", 0) != 0;
  const mx::array& x = in.x;
  const mx::array sum = WindowSum(
      x, in.axes, [](const mx::array& v) { return v; }, s);
  const mx::array y = mx::divide(sum, AverageDivisor(in.axes, include_pad, x.dtype(), s), s);
  return {mx::astype(y, out_dtype, s)};
}

/** |v|^p, rounded like ORT's float pow of the magnitude. */
mx::array PowerOfMagnitude(const mx::array& v, int64_t p, mx::Stream s) {
  const mx::array m = mx::abs(v, s);
  if (p == 1) return m;
  if (p == 2) return mx::multiply(m, m, s);
  return mx::power(m, mx::array(static_cast<double>(p), m.dtype()), s);
}

/** sum^(1/p), with 1/p rounded to float as ORT's `1.0f / p`. */
mx::array RootOf(const mx::array& sum, int64_t p, mx::Stream s) {
  if (p == 1) return sum;
  if (p == 2) return mx::sqrt(sum, s);
  return mx::power(sum, mx::array(1.0f / static_cast<float>(p), sum.dtype()), s);
}

std::vector<mx::array> TranslateLpPool(const OpContext& c) {
  const mx::Stream s = c.stream;
  const FloatPoolInput in = PrepareFloatPool(c);
  const mx::Dtype out_dtype = c.output_dtype(0);
  if (in.empty) return {mx::zeros(OutShape(in.x, in.axes), out_dtype, s)};
  const int64_t p = c.node.AttrInt("p", 2);
  const mx::array sum = WindowSum(
      in.x, in.axes, [&](const mx::array& v) { return PowerOfMagnitude(v, p, s); }, s);
  return {mx::astype(RootOf(sum, p, s), out_dtype, s)};
}

std::vector<mx::array> TranslateMaxPool(const OpContext& c) {
  const mx::array& x = c.input(0);
  pool::CheckInput(c, x);
  const std::vector<Axis> axes = pool::ResolveAxes(c, pool::ReadAttrs(c.node), x.shape());
  const bool want_indices = c.num_outputs() > 1 && !c.node.outputs[1].empty();
  const mx::Shape out_shape = OutShape(x, axes);
  int64_t size = 1;
  for (int32_t d : out_shape) size *= d;
  if (size == 0) {
    std::vector<mx::array> outs = {mx::zeros(out_shape, x.dtype(), c.stream)};
    if (want_indices) outs.push_back(mx::zeros(out_shape, mx::int64, c.stream));
    return outs;
  }
  if (!want_indices && RuntimeDevice() == mx::Device(mx::Device::cpu))
    if (auto y = pool::MaxPoolOnCpu(x, axes, c.stream)) return {*y};
  return WindowMax(c, x, axes, want_indices, c.node.AttrInt("storage_order", 0) == 1);
}

// ---- Claims ------------------------------------------------------------------------------------

constexpr std::initializer_list<ElemType> kMaxPoolTypes = {ElemType::kFloat,    ElemType::kFloat16,
                                                           ElemType::kBFloat16, ElemType::kDouble,
                                                           ElemType::kInt8,     ElemType::kUInt8};

/** The checks every windowed pool shares: types, rank, attributes. */
Claim ClaimWindowed(const NodeView& v, std::initializer_list<ElemType> types) {
  if (auto r = pool::TypeReason0(v, types)) return Claim::No(*r);
  if (auto r = pool::RankReason(v)) return Claim::No(*r);
  if (auto r = pool::AttrsReason(v)) return Claim::No(*r);
  if (auto r = pool::ShapeReason(v, pool::ReadAttrs(v.node()))) return Claim::No(*r);
  return Claim::Yes();
}

Claim ClaimMaxPool(const NodeView& v) {
  const int64_t order = v.node().AttrInt("storage_order", 0);
  if (order != 0 && order != 1) return Claim::No("storage_order=" + std::to_string(order));
  if (v.has_output(1) && v.output_type(1) != ElemType::kInt64)
    return Claim::No("Indices output is not int64");
  return ClaimWindowed(v, kMaxPoolTypes);
}

Claim ClaimAveragePool(const NodeView& v) { return ClaimWindowed(v, kFloatTypes); }

Claim ClaimLpPool(const NodeView& v) {
  if (const Attribute* p = v.node().Attr("p"); p && p->kind != Attribute::Kind::kInt)
    return Claim::No("attribute p is not an integer");
  const int64_t p = v.node().AttrInt("p", 2);
  if (p < 1) return Claim::No("p=" + std::to_string(p) + " (only p >= 1)");
  return ClaimWindowed(v, kFloatTypes);
}

}  // namespace

void RegisterPoolOps(OpRegistry& r) {
  // One translation per op: later versions only add attributes (dilations, ceil_mode,
  // storage_order) whose defaults give the earlier behaviour, or types.
  r.Add({"", "MaxPool", 1, 25, ClaimMaxPool, TranslateMaxPool});
  // AveragePool 1 and LpPool 1 (float p) have no ORT CPU kernel to be measured against.
  r.Add({"", "AveragePool", 7, 25, ClaimAveragePool, TranslateAveragePool});
  r.Add({"", "LpPool", 2, 25, ClaimLpPool, TranslateLpPool});
  RegisterGlobalPoolOps(r);
}

}  // namespace mlx_ep
