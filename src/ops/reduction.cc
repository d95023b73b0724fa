// Op family: reductions (Reduce*) and ArgMax/ArgMin.
//
// ORT semantics mirrored here (checked against ORT's CPU EP):
//  - axes: attribute before ReduceSum-13 / Reduce*-18, an optional int64 input after (read on the
//    host); negative axes wrap, duplicates count once, no axes means all axes unless
//    noop_with_empty_axes=1, which skips the reduction but still applies the elementwise part
//    (ReduceL1 -> |x|, ReduceL2 -> sqrt(x*x), ReduceSumSquare -> x*x, ReduceLogSum -> log x).
//  - reducing over a 0-size dim gives the reduction's identity: 0 for Sum/Mean/L1/L2/SumSquare,
//    1 for Prod, lowest for Max, highest for Min (-inf/+inf for floats), -inf for LogSum(Exp).
//  - integer ReduceMean truncates toward zero; float16/bfloat16 reductions compute in float32
//    and round once at the end (ORT runs them through float32 kernels).
//  - ORT accumulates integer Sum/Mean/Prod/L1/SumSquare in double and saturates: for int32/uint32
//    we accumulate exactly in 64 bits and saturate, which gives the same results. For int64/uint64
//    we accumulate exactly (wrapping on overflow), where ORT rounds beyond 2^53 and saturates.
//  - ArgMax/ArgMin return the first extreme (last with select_last_index=1) as int64.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/claim_util.h"
#include "ops/reduction_cpu.h"
#include "ops/reduction_internal.h"
#include "ops/registry.h"

namespace mlx_ep {

int64_t TwoStageBlock(int64_t n) {
  return (static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n)))) + 31) / 32 * 32;
}

mx::array AccurateSum(const mx::array& x, const std::vector<int>& axes, bool keepdims, mx::Stream s) {
  if (std::optional<mx::array> kept = AccurateSumOnCpu(x, axes, s)) {
    if (keepdims) return *kept;
    mx::Shape shape;
    for (int d = 0; d < static_cast<int>(x.ndim()); ++d)
      if (!std::binary_search(axes.begin(), axes.end(), d)) shape.push_back(x.shape(d));
    return mx::reshape(*kept, shape, s);
  }
  int64_t n = 1;
  for (int a : axes) n *= x.shape(a);
  if (n < kTwoStageSumFrom || !mx::issubdtype(x.dtype(), mx::floating)) return mx::sum(x, axes, keepdims, s);

  // Reduced axes last, flattened: [kept..., n] -> [kept..., blocks, block] (zero-padded).
  std::vector<int> perm;
  mx::Shape kept, keep_shape = x.shape();
  for (int i = 0; i < static_cast<int>(x.ndim()); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) {
      perm.push_back(i);
      kept.push_back(x.shape(i));
    } else {
      keep_shape[i] = 1;
    }
  perm.insert(perm.end(), axes.begin(), axes.end());
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int>(i);
  mx::array t = identity ? x : mx::transpose(x, perm, s);
  mx::Shape flat = kept;
  flat.push_back(static_cast<int>(n));
  t = mx::reshape(t, flat, s);
  const int64_t block = TwoStageBlock(n);
  const int64_t blocks = (n + block - 1) / block;
  if (blocks * block != n)
    t = mx::pad(t, {static_cast<int>(flat.size()) - 1}, {0}, {static_cast<int>(blocks * block - n)},
                mx::array(0, x.dtype()), "constant", s);
  mx::Shape split = kept;
  split.push_back(static_cast<int>(blocks));
  split.push_back(static_cast<int>(block));
  mx::array r = mx::sum(mx::sum(mx::reshape(t, split, s), -1, false, s), -1, false, s);
  return keepdims ? mx::reshape(r, keep_shape, s) : r;
}

namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSumExp, kLogSum };

/** The schema version from which the op takes its axes as input 1 instead of an attribute. */
int AxesInputSince(Reduce k) { return k == Reduce::kSum ? 13 : 18; }

bool IsLowFloat(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }

/** Types each reduction takes (the ONNX type constraints; ORT kernels cover a subset). */
bool TypeAllowed(Reduce k, ElemType t, int since) {
  if (IsFloating(t)) return true;
  switch (k) {
    case Reduce::kL2:
    case Reduce::kLogSumExp:
    case Reduce::kLogSum:
      // Integer variants round through float math in ORT (sqrt/log/exp then truncate); not worth it.
      return false;
    case Reduce::kMax:
    case Reduce::kMin:
      if (t == ElemType::kBool) return since >= 20;
      if (t == ElemType::kInt8 || t == ElemType::kUInt8) return since >= 12;
      [[fallthrough]];
    default:
      return IsOneOf(t, {ElemType::kInt32, ElemType::kInt64, ElemType::kUInt32, ElemType::kUInt64});
  }
}

template <Reduce K>
Claim ClaimReduce(const NodeView& v) {
  const Node& n = v.node();
  const ElemType t = v.input_type(0);
  if (!TypeAllowed(K, t, n.since_version)) return Claim::No(TypeReason(v, 0));
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  const int64_t keepdims = n.AttrInt("keepdims", 1);
  if (keepdims != 0 && keepdims != 1)
    return Claim::No("attribute keepdims=" + std::to_string(keepdims) + " not supported");
  if (n.since_version >= AxesInputSince(K)) {
    const int64_t noop = n.AttrInt("noop_with_empty_axes", 0);
    if (noop != 0 && noop != 1)
      return Claim::No("attribute noop_with_empty_axes=" + std::to_string(noop) + " not supported");
    if (v.has_input(1)) {
      if (v.input_type(1) != ElemType::kInt64) return Claim::No(TypeReason(v, 1, "axes"));
      return Claim::Yes({1});
    }
  }
  return Claim::Yes();
}

/** The value a reduction over nothing yields, as a scalar of dtype `d`. */
mx::array EmptyValue(Reduce k, mx::Dtype d) {
  const double inf = std::numeric_limits<double>::infinity();
  auto lowest = [&]() -> mx::array {
    switch (d.val()) {
      case mx::Dtype::Val::int8:
        return mx::array(std::numeric_limits<int8_t>::lowest(), d);
      case mx::Dtype::Val::int16:
        return mx::array(std::numeric_limits<int16_t>::lowest(), d);
      case mx::Dtype::Val::int32:
        return mx::array(std::numeric_limits<int32_t>::lowest(), d);
      case mx::Dtype::Val::int64:
        return mx::array(std::numeric_limits<int64_t>::lowest(), d);
      case mx::Dtype::Val::uint8:
      case mx::Dtype::Val::uint16:
      case mx::Dtype::Val::uint32:
      case mx::Dtype::Val::uint64:
        return mx::array(0, d);
      default:
        return mx::array(-inf, d);
    }
  };
  auto highest = [&]() -> mx::array {
    switch (d.val()) {
      case mx::Dtype::Val::int8:
        return mx::array(std::numeric_limits<int8_t>::max(), d);
      case mx::Dtype::Val::int16:
        return mx::array(std::numeric_limits<int16_t>::max(), d);
      case mx::Dtype::Val::int32:
        return mx::array(std::numeric_limits<int32_t>::max(), d);
      case mx::Dtype::Val::int64:
        return mx::array(std::numeric_limits<int64_t>::max(), d);
      case mx::Dtype::Val::uint8:
        return mx::array(std::numeric_limits<uint8_t>::max(), d);
      case mx::Dtype::Val::uint16:
        return mx::array(std::numeric_limits<uint16_t>::max(), d);
      case mx::Dtype::Val::uint32:
        return mx::array(std::numeric_limits<uint32_t>::max(), d);
      case mx::Dtype::Val::uint64:
        return mx::array(std::numeric_limits<uint64_t>::max(), d);
      default:
        return mx::array(inf, d);
    }
  };
  switch (k) {
    case Reduce::kMax:
      return lowest();
    case Reduce::kMin:
      return highest();
    case Reduce::kProd:
      return mx::array(1, d);
    case Reduce::kLogSumExp:
    case Reduce::kLogSum:
      return mx::array(-inf, d);
    default:
      return mx::array(0, d);
  }
}

/** Integer division by a positive count, truncating toward zero (ORT's integer ReduceMean). */
mx::array TruncDivide(const mx::array& a, int64_t count, mx::Stream s) {
  const mx::array b(count, a.dtype());
  const mx::array q = mx::floor_divide(a, b, s);
  const mx::array r = mx::subtract(a, mx::multiply(q, b, s), s);
  // Floor and trunc differ (by one) for negative sums that don't divide evenly.
  const mx::array zero = mx::zeros_like(a, s);
  const mx::array fix = mx::logical_and(mx::not_equal(r, zero, s), mx::less(a, zero, s), s);
  return mx::add(q, mx::astype(fix, q.dtype(), s), s);
}

template <Reduce K>
std::vector<mx::array> TranslateReduce(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const mx::Dtype out_dtype = c.output_dtype(0);
  const int rank = static_cast<int>(x.ndim());
  const bool keepdims = n.AttrInt("keepdims", 1) != 0;

  std::vector<int64_t> axes;
  bool noop = false;
  if (n.since_version >= AxesInputSince(K)) {
    noop = n.AttrInt("noop_with_empty_axes", 0) != 0;
    if (c.has_input(1)) {
      if (c.host(1).shape.size() != 1) c.Fail("An axes tensor must be a vector tensor");
      axes = c.host_ints(1);
    }
  } else if (auto a = n.AttrInts("axes")) {
    axes = *a;
  }

  // float16/bfloat16 compute in float32 like ORT; Max/Min are exact in any type.
  const bool widen = IsLowFloat(x.dtype()) && K != Reduce::kMax && K != Reduce::kMin;
  // 32-bit integers accumulate in 64 bits and saturate at the end: ORT accumulates integer
  // reductions in double and clamps to the type's range.
  const bool wide_int =
      (x.dtype() == mx::int32 || x.dtype() == mx::uint32) && K != Reduce::kMax && K != Reduce::kMin;
  const mx::array xc = widen      ? mx::astype(x, mx::float32, s)
                       : wide_int ? mx::astype(x, x.dtype() == mx::int32 ? mx::int64 : mx::uint64, s)
                                  : x;
  auto finish = [&](mx::array r) -> std::vector<mx::array> {
    if (wide_int)
      r = x.dtype() == mx::int32
              ? mx::clip(r, mx::array(std::numeric_limits<int32_t>::lowest(), r.dtype()),
                         mx::array(std::numeric_limits<int32_t>::max(), r.dtype()), s)
              : mx::clip(r, std::nullopt, mx::array(std::numeric_limits<uint32_t>::max(), r.dtype()), s);
    return {r.dtype() == out_dtype ? r : mx::astype(r, out_dtype, s)};
  };

  if (axes.empty() && noop) {
    switch (K) {
      case Reduce::kL1:
        return finish(mx::abs(xc, s));
      case Reduce::kL2:
        return finish(mx::sqrt(mx::multiply(xc, xc, s), s));
      case Reduce::kSumSquare:
        return finish(mx::multiply(xc, xc, s));
      case Reduce::kLogSum:
        return finish(mx::log(xc, s));
      default:
        return {x};
    }
  }

  std::vector<bool> reduced(rank, axes.empty());
  if (rank == 0) axes.clear();  // ORT reduces a scalar to itself whatever the axes say
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      c.Fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    reduced[a < 0 ? a + rank : a] = true;
  }
  std::vector<int> ax;
  mx::Shape out_shape;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (reduced[i]) {
      ax.push_back(i);
      count *= x.shape(i);
      if (keepdims) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.shape(i));
    }
  }

  if (x.size() == 0) {           // an empty input: the output is empty or the reduction's identity
    if (x.dtype() == mx::bool_)  // ONNX: Max of nothing is false, Min true (ORT's CPU EP errors)
      return {mx::full(out_shape, mx::array(K == Reduce::kMin), out_dtype, s)};
    return {mx::full(out_shape, EmptyValue(K, out_dtype), out_dtype, s)};
  }

  switch (K) {
    case Reduce::kSum:
      return finish(AccurateSum(xc, ax, keepdims, s));
    case Reduce::kMean: {
      mx::array sum = AccurateSum(xc, ax, keepdims, s);
      if (IsFloating(FromMlxDtype(xc.dtype())))
        return finish(mx::divide(sum, mx::array(static_cast<double>(count), sum.dtype()), s));
      return finish(TruncDivide(sum, count, s));
    }
    case Reduce::kMax:
      if (x.dtype() == mx::bool_) return finish(mx::any(x, ax, keepdims, s));
      return finish(mx::max(x, ax, keepdims, s));
    case Reduce::kMin:
      if (x.dtype() == mx::bool_) return finish(mx::all(x, ax, keepdims, s));
      return finish(mx::min(x, ax, keepdims, s));
    case Reduce::kProd: {
      mx::array p = mx::prod(xc, ax, keepdims, s);
      if (wide_int) {
        // The 64-bit product is exact unless it passes 2^63; a float32 estimate catches those
        // (far beyond the 32-bit range: finish() saturates them).
        const mx::array est = mx::prod(mx::astype(x, mx::float32, s), ax, keepdims, s);
        const mx::array huge = mx::greater(mx::abs(est, s), mx::array(1099511627776.0f), s);  // 2^40
        const mx::array sat = x.dtype() == mx::int32
                                  ? mx::where(mx::less(est, mx::array(0.f), s), mx::array(int64_t{-1} << 40),
                                              mx::array(int64_t{1} << 40), s)
                                  : mx::array(uint64_t{1} << 40);
        p = mx::where(huge, mx::astype(sat, p.dtype(), s), p, s);
      }
      return finish(p);
    }
    case Reduce::kL1:
      return finish(AccurateSum(mx::abs(xc, s), ax, keepdims, s));
    case Reduce::kL2:
      return finish(mx::sqrt(AccurateSum(mx::multiply(xc, xc, s), ax, keepdims, s), s));
    case Reduce::kSumSquare: {
      mx::array r = AccurateSum(mx::multiply(xc, xc, s), ax, keepdims, s);
      if (wide_int) {  // squares of 32-bit values can pass 2^63 within a few terms
        const mx::array xf = mx::astype(x, mx::float32, s);
        const mx::array est = mx::sum(mx::multiply(xf, xf, s), ax, keepdims, s);
        r = mx::where(mx::greater(est, mx::array(1099511627776.0f), s),
                      mx::array(int64_t{1} << 40, r.dtype()), r, s);
      }
      return finish(r);
    }
    case Reduce::kLogSumExp: {
      // MLX's float64 exp runs at float32 precision: compose with an exact exp there.
      if (xc.dtype() != mx::float64) return finish(mx::logsumexp(xc, ax, keepdims, s));
      const mx::array m = mx::max(xc, ax, true, s);
      const mx::array e = mx::power(mx::array(M_E, mx::float64), mx::subtract(xc, m, s), s);
      mx::array r = mx::add(mx::log(AccurateSum(e, ax, true, s), s), m, s);
      r = mx::where(mx::isinf(m, s), m, r, s);  // all -inf, or a +inf: the max itself
      return finish(keepdims ? r : mx::squeeze(r, ax, s));
    }
    case Reduce::kLogSum:
      return finish(mx::log(AccurateSum(xc, ax, keepdims, s), s));
  }
  c.Fail("unknown reduction");
}

// ---- ArgMax / ArgMin ------------------------------------------------------------------------

Claim ClaimArgReduce(const NodeView& v) {
  const Node& n = v.node();
  const ElemType t = v.input_type(0);
  if (!IsNumeric(t)) return Claim::No(TypeReason(v, 0));
  if (v.output_type(0) != ElemType::kInt64) return Claim::No("output type is not int64");
  const int64_t keepdims = n.AttrInt("keepdims", 1);
  if (keepdims != 0 && keepdims != 1)
    return Claim::No("attribute keepdims=" + std::to_string(keepdims) + " not supported");
  const int64_t last = n.AttrInt("select_last_index", 0);
  if (last != 0 && last != 1)
    return Claim::No("attribute select_last_index=" + std::to_string(last) + " not supported");
  return Claim::Yes();
}

template <bool kMax>
std::vector<mx::array> TranslateArgReduce(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  const mx::array& x = c.input(0);
  const int rank = static_cast<int>(x.ndim());
  int64_t axis = n.AttrInt("axis", 0);
  if (axis < -rank || axis >= rank)
    c.Fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  const bool keepdims = n.AttrInt("keepdims", 1) != 0;
  const bool last = n.AttrInt("select_last_index", 0) != 0;
  const int len = x.shape(ax);
  if (x.size() == 0) {
    mx::Shape out_shape = x.shape();
    if (keepdims)
      out_shape[ax] = 1;
    else
      out_shape.erase(out_shape.begin() + ax);
    int64_t out_size = 1;
    for (int d : out_shape) out_size *= d;
    if (out_size > 0) c.Fail("cannot take the arg-extreme of an empty axis");
    return {mx::zeros(out_shape, mx::int64, s)};
  }
  mx::array in = x;
  if (last) in = mx::take(x, mx::arange(len - 1, -1, -1, mx::int32, s), ax, s);
  mx::array idx = kMax ? mx::argmax(in, ax, keepdims, s) : mx::argmin(in, ax, keepdims, s);
  idx = mx::astype(idx, mx::int64, s);
  if (last) idx = mx::subtract(mx::array(static_cast<int64_t>(len - 1), mx::int64), idx, s);
  return {idx};
}

}  // namespace

void RegisterReductionOps(OpRegistry& r) {
  // One range per op, from opset 1 to its newest schema: the translations read the version-
  // dependent parts (axes attribute or input, noop_with_empty_axes, select_last_index) themselves.
  // Sum, Max, Min and Prod also fold at trace time (shape arithmetic uses them).
#define MLX_EP_REDUCE(Op, Kind, Last, Fold) \
  r.Add({"", Op, 1, Last, ClaimReduce<Reduce::Kind>, TranslateReduce<Reduce::Kind>, Fold})
  constexpr HostEval kFold = HostEval::kFromValues, kNoFold = HostEval::kNone;
  MLX_EP_REDUCE("ReduceSum", kSum, 13, kFold);
  MLX_EP_REDUCE("ReduceMean", kMean, 18, kNoFold);
  MLX_EP_REDUCE("ReduceMax", kMax, 20, kFold);
  MLX_EP_REDUCE("ReduceMin", kMin, 20, kFold);
  MLX_EP_REDUCE("ReduceProd", kProd, 18, kFold);
  MLX_EP_REDUCE("ReduceL1", kL1, 18, kNoFold);
  MLX_EP_REDUCE("ReduceL2", kL2, 18, kNoFold);
  MLX_EP_REDUCE("ReduceSumSquare", kSumSquare, 18, kNoFold);
  MLX_EP_REDUCE("ReduceLogSumExp", kLogSumExp, 18, kNoFold);
  MLX_EP_REDUCE("ReduceLogSum", kLogSum, 18, kNoFold);
#undef MLX_EP_REDUCE
  r.Add({"", "ArgMax", 1, 13, ClaimArgReduce, TranslateArgReduce<true>});
  r.Add({"", "ArgMin", 1, 13, ClaimArgReduce, TranslateArgReduce<false>});
}

}  // namespace mlx_ep
