#include "runtime/rows_rules.h"

#include <algorithm>
#include <unordered_map>

namespace mlx_ep::rows_rules {

RowState Rows(int axis, bool zero) {
  RowState s;
  s.kind = Kind::kRows;
  s.axis = axis;
  s.zero_rows = zero;
  return s;
}

namespace {

Outcome Fail(std::string why) { return {{}, std::move(why)}; }

RowState ShapeWith(std::vector<int64_t> positions) {
  RowState s;
  if (positions.empty()) return s;
  s.kind = Kind::kShape;
  s.positions = std::move(positions);
  return s;
}

Outcome All(const RowNode& v, const RowState& s) { return {std::vector<RowState>(v.outs.size(), s), ""}; }

int Normalize(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

/** The common token axis of the inputs in the frame of a rank-`rank` result (numpy
 *  broadcasting), or -1 with `why` set: every input is kSame or kRows, their axes align, and no
 *  kSame input spans that axis. */
int BroadcastAxis(const RowNode& v, int rank, const std::vector<size_t>& inputs, std::string& why) {
  int axis = -1;
  for (size_t i : inputs) {
    if (!v.Present(i) || v.KindOf(i) == Kind::kSame) continue;
    if (v.KindOf(i) != Kind::kRows) {
      why = "reads a value computed from the padded length as data";
      return -1;
    }
    const int b = v.st[i].axis + rank - v.Rank(i);
    if (axis >= 0 && axis != b) {
      why = "its inputs' token axes do not align";
      return -1;
    }
    axis = b;
  }
  for (size_t i : inputs) {
    if (!v.Present(i) || v.KindOf(i) != Kind::kSame) continue;
    const int k = axis - (rank - v.Rank(i));
    if (k >= 0 && v.in[i]->shape(k) != 1) {
      why = "an operand that does not depend on the prompt spans the token axis";
      return -1;
    }
  }
  if (axis < 0 && why.empty()) why = "no token axis";
  return axis;
}

std::vector<size_t> AllInputs(const RowNode& v) {
  std::vector<size_t> all(v.in.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

Outcome Elementwise(const RowNode& v) {
  std::string why;
  const int axis = BroadcastAxis(v, v.outs.at(0).ndim(), AllInputs(v), why);
  return axis < 0 ? Fail(why) : All(v, Rows(axis));
}

/** Cast and Identity keep every state, and zeros stay zeros. */
Outcome PassThrough(const RowNode& v) { return All(v, v.st.at(0)); }

Outcome ShapeOf(const RowNode& v) {
  if (v.KindOf(0) != Kind::kRows) return All(v, RowState{});  // a length's or shape's shape is fixed
  const int rank = v.Rank(0);
  auto clamp = [&](int64_t a) { return std::clamp(Normalize(a, rank), 0, rank); };
  const int start = clamp(v.node().AttrInt("start", 0)), end = clamp(v.node().AttrInt("end", rank));
  const int axis = v.st[0].axis;
  return All(v, axis >= start && axis < end ? ShapeWith({axis - start}) : RowState{});
}

/** Gather of a shape vector's elements (kShape data, known indices). */
/** The elements `picked` (indices into a kShape vector of `n`, negative from the end) take from
 *  `shape`: the positions among them that hold the padded length. */
std::vector<int64_t> PickedPositions(const RowState& shape, const std::vector<int64_t>& picked, int64_t n) {
  const std::vector<int64_t>& p = shape.positions;
  std::vector<int64_t> positions;
  for (size_t j = 0; j < picked.size(); ++j)
    if (std::count(p.begin(), p.end(), picked[j] < 0 ? picked[j] + n : picked[j]))
      positions.push_back(static_cast<int64_t>(j));
  return positions;
}

Outcome GatherShape(const RowNode& v) {
  const auto idx = v.SameInts(1);
  if (!idx || v.Rank(1) > 1) return Fail("gathers from a shape at indices not known while tracing");
  const std::vector<int64_t> positions = PickedPositions(v.st[0], *idx, v.in[0]->shape(0));
  if (v.Rank(1) == 1) return All(v, ShapeWith(positions));
  RowState s;
  if (!positions.empty()) s.kind = Kind::kLength;
  return All(v, s);
}

Outcome Gather(const RowNode& v) {
  const Kind data = v.KindOf(0), indices = v.KindOf(1);
  if (data == Kind::kShape && indices == Kind::kSame) return GatherShape(v);
  const int g = Normalize(v.node().AttrInt("axis", 0), v.Rank(0));
  if (data == Kind::kSame && indices == Kind::kRows) {
    // An embedding lookup: padding indices are 0, a valid row of any non-empty table (MLX's
    // gather does not check bounds, so any other padding could read outside it).
    if (!v.st[1].zero_rows) return Fail("gathers at indices whose padding is not zero");
    if (v.in[0]->shape(g) == 0) return Fail("gathers from an empty table");
    return All(v, Rows(g + v.st[1].axis));
  }
  if (data == Kind::kRows && indices == Kind::kSame) {
    const int a = v.st[0].axis;
    if (g == a) return Fail("gathers along the token axis");
    return All(v, Rows(a < g ? a : a - 1 + v.Rank(1), v.st[0].zero_rows));
  }
  return Fail("gathers with indices that depend on the prompt");
}

/** A Reshape target gives output axis `b` the input's token axis `a` in both traces: there the
 *  target holds -1, 0 (a copy of axis a) or the padded length from a shape (kShape), never a
 *  number that only happens to equal it; no other 0 copies axis a. */
bool ReshapeKeepsTokens(const RowNode& v, int a, int b) {
  const RowState& target = v.st.at(1);
  if (target.kind == Kind::kShape) {
    if (target.positions != std::vector<int64_t>{b}) return false;
  } else if (target.kind != Kind::kSame) {
    return false;
  }
  if (!v.host.at(1)) return false;
  const std::vector<int64_t> t = v.host[1]->ToInt64();
  const bool allow_zero = v.node().AttrInt("allowzero", 0) != 0;
  for (int j = 0; j < static_cast<int>(t.size()); ++j) {
    const bool copies_tokens = t[j] == 0 && !allow_zero && j == a;
    if (j == b && target.kind == Kind::kSame && t[j] != -1 && !copies_tokens) return false;
    if (j != b && copies_tokens) return false;
  }
  return b < static_cast<int>(t.size());
}

/** Reshape, Flatten, Squeeze, Unsqueeze: the token axis must stay one axis with the same outer
 *  dims, and the target must not depend on the padded length elsewhere. */
Outcome Regroup(const RowNode& v) {
  const mx::array& out = v.outs.at(0);
  if (v.KindOf(0) == Kind::kLength && out.ndim() == 1 && out.size() == 1) return All(v, ShapeWith({0}));
  if (v.KindOf(0) != Kind::kRows) return Fail("reshapes a value computed from the padded length");
  const mx::array& x = *v.in[0];
  const int a = v.st[0].axis;
  int64_t outer = 1;
  for (int d = 0; d < a; ++d) outer *= x.shape(d);
  int b = -1;
  int64_t prefix = 1;
  for (int d = 0; d < static_cast<int>(out.ndim()) && prefix <= outer; ++d) {
    if (prefix == outer && out.shape(d) == x.shape(a)) {
      b = d;
      break;
    }
    prefix *= out.shape(d);
  }
  if (b < 0) return Fail("merges or splits the token axis");
  if (v.node().op_type == "Reshape" && !ReshapeKeepsTokens(v, a, b))
    return Fail("its target does not follow the prompt's length on the token axis");
  if (v.node().op_type != "Reshape" && v.Present(1) && v.KindOf(1) != Kind::kSame)
    return Fail("its axes depend on the prompt");
  return All(v, Rows(b, v.st[0].zero_rows));
}

Outcome Transpose(const RowNode& v) {
  if (v.KindOf(0) != Kind::kRows) return Fail("transposes a value computed from the padded length");
  const int rank = v.Rank(0);
  std::vector<int64_t> perm(rank);
  for (int d = 0; d < rank; ++d) perm[d] = rank - 1 - d;
  if (auto p = v.node().AttrInts("perm")) perm = *p;
  for (int b = 0; b < static_cast<int>(perm.size()); ++b)
    if (Normalize(perm[b], rank) == v.st[0].axis) return All(v, Rows(b, v.st[0].zero_rows));
  return Fail("a transpose without the token axis");
}

/** MatMul, FusedMatMul and MatMulNBits: rows of A along a batch or row axis, B the same. */
Outcome MatMul(const RowNode& v) {
  const std::string& op = v.node().op_type;
  if (op == "FusedMatMul" && (v.node().AttrInt("transA", 0) || v.node().AttrInt("transBatchA", 0) ||
                              v.node().AttrInt("transBatchB", 0)))
    return Fail("a transposed FusedMatMul");
  for (size_t i = 1; i < v.in.size(); ++i)
    if (v.KindOf(i) != Kind::kSame) return Fail("its weights depend on the prompt");
  if (v.KindOf(0) != Kind::kRows) return Fail("multiplies a value computed from the padded length");
  const int rank = v.Rank(0), a = v.st[0].axis;
  if (rank < 2 || a == rank - 1) return Fail("the token axis is the reduced axis");
  if (op == "MatMulNBits") return All(v, Rows(a));
  const int out_rank = v.outs.at(0).ndim();
  const int b = v.Rank(1) == 1 ? a : a + out_rank - rank;
  if (a < rank - 2 && v.Rank(1) >= 2) {
    const int k = b - (out_rank - v.Rank(1));
    if (k >= 0 && v.in[1]->shape(k) != 1) return Fail("the weights span the token axis");
  }
  return All(v, Rows(b));
}

/** The norms: every input aligned as for an elementwise op, the token axis before the
 *  normalized ones. */
Outcome Norm(const RowNode& v) {
  const int rank = v.outs.at(0).ndim();
  const bool skip = v.node().op_type.rfind("Skip", 0) == 0;
  const int start = skip ? rank - 1 : Normalize(v.node().AttrInt("axis", -1), rank);
  std::string why;
  const int axis = BroadcastAxis(v, rank, AllInputs(v), why);
  if (axis < 0) return Fail(why);
  if (axis >= start) return Fail("normalizes over the token axis");
  Outcome o;
  for (const mx::array& out : v.outs) o.out.push_back(Rows(axis + out.ndim() - rank));
  return o;
}

/** The reduce ops: row-local along other axes; an integer sum over the token axis of zero
 *  padding is exact (float sums are not: a longer axis regroups the additions). */
Outcome Reduce(const RowNode& v) {
  if (v.KindOf(0) != Kind::kRows) return Fail("reduces a value computed from the padded length");
  const int rank = v.Rank(0), a = v.st[0].axis;
  std::vector<int64_t> axes;
  if (v.Present(1)) {
    auto given = v.SameInts(1);
    if (!given) return Fail("reduces over axes not known while tracing");
    axes = *given;
  } else if (auto attr = v.node().AttrInts("axes")) {
    axes = *attr;
  }
  if (axes.empty()) {
    if (v.node().AttrInt("noop_with_empty_axes", 0)) return All(v, v.st[0]);
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& d : axes) d = Normalize(d, rank);
  const bool keep = v.node().AttrInt("keepdims", 1) != 0;
  if (std::count(axes.begin(), axes.end(), a)) {
    const mx::Dtype t = v.in[0]->dtype();
    const bool exact = v.node().op_type == "ReduceSum" && v.st[0].zero_rows &&
                       (mx::issubdtype(t, mx::integer) || t == mx::bool_);
    return exact ? All(v, RowState{}) : Fail("reduces over the token axis");
  }
  const int below =
      static_cast<int>(std::count_if(axes.begin(), axes.end(), [&](int64_t d) { return d < a; }));
  return All(v, Rows(keep ? a : a - below, v.node().op_type == "ReduceSum" && v.st[0].zero_rows));
}

Outcome Softmax(const RowNode& v) {
  if (v.KindOf(0) != Kind::kRows) return Fail("a softmax of a value computed from the padded length");
  const int rank = v.Rank(0), a = v.st[0].axis;
  const bool per_axis = v.node().since_version >= 13;
  const int axis = Normalize(v.node().AttrInt("axis", per_axis ? -1 : 1), rank);
  if (per_axis ? axis == a : a >= axis) return Fail("a softmax over the token axis");
  return All(v, Rows(a));
}

Outcome Concat(const RowNode& v) {
  const int rank = v.outs.at(0).ndim();
  const int c = Normalize(v.node().AttrInt("axis", 0), rank);
  if (rank == 1) {  // shape vectors
    std::vector<int64_t> positions;
    int64_t at = 0;
    for (size_t i = 0; i < v.in.size(); ++i) {
      if (v.KindOf(i) == Kind::kShape)
        for (int64_t p : v.st[i].positions) positions.push_back(at + p);
      else if (v.KindOf(i) != Kind::kSame)
        return Fail("concatenates rows into a vector");
      at += v.Present(i) ? v.in[i]->shape(0) : 0;
    }
    return All(v, ShapeWith(positions));
  }
  int axis = -1;
  for (size_t i = 0; i < v.in.size(); ++i) {
    if (!v.Present(i)) continue;
    if (v.KindOf(i) != Kind::kRows || (axis >= 0 && v.st[i].axis != axis))
      return Fail("concatenates rows with values that do not have them");
    axis = v.st[i].axis;
  }
  if (axis == c) return Fail("concatenates along the token axis");
  return All(v, Rows(axis));
}

/** The indices Slice selects of a 1-D value of `n` elements (ONNX's clamping). */
std::optional<std::vector<int64_t>> SlicedIndices(const RowNode& v, int64_t n) {
  auto starts = v.SameInts(1), ends = v.SameInts(2);
  if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
  if (v.Present(3) && v.SameInts(3) != std::vector<int64_t>{0} && v.SameInts(3) != std::vector<int64_t>{-1})
    return std::nullopt;
  int64_t step = 1;
  if (v.Present(4)) {
    auto steps = v.SameInts(4);
    if (!steps || steps->size() != 1 || (*steps)[0] == 0) return std::nullopt;
    step = (*steps)[0];
  }
  auto norm = [&](int64_t x, int64_t lo, int64_t hi) { return std::clamp(x < 0 ? x + n : x, lo, hi); };
  const int64_t b = step > 0 ? norm((*starts)[0], 0, n) : norm((*starts)[0], 0, n - 1);
  const int64_t e = step > 0 ? norm((*ends)[0], 0, n) : norm((*ends)[0], -1, n - 1);
  std::vector<int64_t> picked;
  for (int64_t j = b; step > 0 ? j < e : j > e; j += step) picked.push_back(j);
  return picked;
}

Outcome Slice(const RowNode& v) {
  for (size_t i = 1; i < v.in.size(); ++i)
    if (v.Present(i) && v.KindOf(i) != Kind::kSame) return Fail("slices at positions from the padded length");
  if (v.KindOf(0) == Kind::kShape && v.Rank(0) == 1) {
    auto picked = SlicedIndices(v, v.in[0]->shape(0));
    if (!picked || static_cast<int64_t>(picked->size()) != v.outs.at(0).shape(0))
      return Fail("slices a shape at positions not known while tracing");
    return All(v, ShapeWith(PickedPositions(v.st[0], *picked, v.in[0]->shape(0))));
  }
  if (v.KindOf(0) != Kind::kRows) return Fail("slices a value computed from the padded length");
  const int rank = v.Rank(0), a = v.st[0].axis;
  std::vector<int64_t> axes;
  if (v.Present(3)) {
    auto given = v.SameInts(3);
    if (!given) return Fail("slices axes not known while tracing");
    axes = *given;
  } else {
    auto starts = v.SameInts(1);
    if (!starts) return Fail("slices at starts not known while tracing");
    for (size_t d = 0; d < starts->size(); ++d) axes.push_back(static_cast<int64_t>(d));  // ONNX's default
  }
  for (int64_t d : axes)
    if (Normalize(d, rank) == a) return Fail("slices the token axis");
  return All(v, Rows(a, v.st[0].zero_rows));
}

/** GroupQueryAttention on a first prompt (total_sequence_length is the padded length, so both
 *  traces are first prompts): query row s reads keys 0..s only and its own rotary position s, and
 *  the padding rows land after the real ones in present, whose in-place write the runner cuts. */
Outcome GroupQueryAttention(const RowNode& v) {
  enum { kQuery, kKey, kValue, kPastKey, kPastValue, kSeqlens, kTotal, kCos, kSin, kPositionIds, kBias };
  if (v.KindOf(kQuery) != Kind::kRows || v.st[kQuery].axis != 1 || v.Rank(kQuery) != 3)
    return Fail("its query does not hold the prompt along axis 1");
  for (size_t i : {kKey, kValue})
    if (v.Present(i) && (v.KindOf(i) != Kind::kRows || v.st[i].axis != 1))
      return Fail("its key/value do not hold the prompt along axis 1");
  if (!v.Present(kPastKey) || !v.Present(kPastValue)) return Fail("it has no past buffer to write in place");
  if (v.KindOf(kTotal) != Kind::kLength)
    return Fail("total_sequence_length is not the prompt's length (not a first prompt)");
  for (size_t i : {kPastKey, kPastValue, kSeqlens, kCos, kSin})
    if (v.KindOf(i) != Kind::kSame) return Fail("its past, seqlens_k or rotary caches depend on the prompt");
  for (size_t i = kPositionIds; i < v.in.size(); ++i)
    if (v.Present(i) && (i <= kBias || v.KindOf(i) != Kind::kSame))
      return Fail("position_ids or attention_bias follow the prompt");
  Outcome o;
  o.out.push_back(Rows(1));
  for (size_t k = 1; k < v.outs.size(); ++k) {
    RowState s;
    s.kind = k <= 2 ? Kind::kInPlace : Kind::kDiffers;
    s.axis = 2;
    o.out.push_back(s);
  }
  return o;
}

}  // namespace

const Rule* RuleFor(const Node& node) {
  static const std::unordered_map<std::string, Rule> rules = [] {
    std::unordered_map<std::string, Rule> r;
    for (const char* op : {"Add",
                           "Sub",
                           "Mul",
                           "Div",
                           "Pow",
                           "Max",
                           "Min",
                           "Sum",
                           "Mean",
                           "Where",
                           "Equal",
                           "Less",
                           "Greater",
                           "LessOrEqual",
                           "GreaterOrEqual",
                           "And",
                           "Or",
                           "Xor",
                           "Not",
                           "Mod",
                           "Sigmoid",
                           "Tanh",
                           "Relu",
                           "Neg",
                           "Exp",
                           "Log",
                           "Sqrt",
                           "Reciprocal",
                           "Abs",
                           "Erf",
                           "Softplus",
                           "Gelu",
                           "LeakyRelu",
                           "Elu",
                           "HardSigmoid",
                           "HardSwish",
                           "Mish",
                           "Sign",
                           "Floor",
                           "Ceil",
                           "Round",
                           "Sin",
                           "Cos",
                           "Clip",
                           "PRelu",
                           "IsNaN",
                           "IsInf",
                           "com.microsoft:FastGelu",
                           "com.microsoft:QuickGelu",
                           "com.microsoft:BiasGelu",
                           "com.microsoft:Gelu",
                           "com.microsoft:BiasAdd"})
      r[op] = Elementwise;
    for (const char* op : {"Cast", "Identity"}) r[op] = PassThrough;
    r["Shape"] = ShapeOf;
    r["Gather"] = Gather;
    for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze"}) r[op] = Regroup;
    r["Transpose"] = Transpose;
    for (const char* op : {"MatMul", "com.microsoft:MatMulNBits", "com.microsoft:FusedMatMul"})
      r[op] = MatMul;
    for (const char* op :
         {"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
          "com.microsoft:SkipLayerNormalization", "com.microsoft:SkipSimplifiedLayerNormalization"})
      r[op] = Norm;
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                           "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum"})
      r[op] = Reduce;
    for (const char* op : {"Softmax", "LogSoftmax"}) r[op] = Softmax;
    r["Concat"] = Concat;
    r["Slice"] = Slice;
    r["com.microsoft:GroupQueryAttention"] = GroupQueryAttention;
    return r;
  }();
  const std::string domain = node.domain == "ai.onnx" ? "" : node.domain;
  auto it = rules.find(domain.empty() ? node.op_type : domain + ":" + node.op_type);
  return it == rules.end() ? nullptr : &it->second;
}

}  // namespace mlx_ep::rows_rules
