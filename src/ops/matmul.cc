// Op family: MatMul (numpy semantics) and Gemm.
//
//  - MatMul: 1-D operands are promoted (a: [K] -> [1,K], b: [K] -> [K,1]) and the added dim is
//    dropped again; batch dims broadcast. Floats use mx::matmul; int32/int64/uint32/uint64 (which
//    MLX's matmul lacks) are computed exactly as chunked multiply+sum with wrap-around, like ORT.
//  - Gemm (7+): Y = alpha * op(A) @ op(B) + beta * C with C unidirectionally broadcast to
//    [M, N]; C is optional from 11. beta == 0 ignores C entirely (like ORT, NaN/Inf in C
//    don't leak). With K == 0, ORT returns C broadcast without applying beta; so do we. Gemm 1-6 (`broadcast`
//    attribute) is declined: ORT's CPU EP has no kernel.
#include <algorithm>

#include "ops/attention_heads_cuda.h"
#include "ops/claim_util.h"
#include "ops/matmul_internal.h"
#include "ops/matmul_rows_cuda.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

constexpr std::initializer_list<ElemType> kMatmulIntTypes = {ElemType::kInt32, ElemType::kInt64,
                                                             ElemType::kUInt32, ElemType::kUInt64};

/** Exact integer a @ b for a: [..., M, K], b: [..., K, N] (ranks >= 2, batch dims broadcast). */
mx::array IntegerMatmul(const mx::array& a, const mx::array& b, mx::Stream s) {
  const int K = a.shape(-1);
  // Bound the [..., M, k, N] temporaries to ~16M elements per chunk.
  int64_t per_k = static_cast<int64_t>(a.shape(-2)) * b.shape(-1);
  const int batch_rank = static_cast<int>(std::max(a.ndim(), b.ndim())) - 2;
  for (int i = 1; i <= batch_rank; ++i) {
    const int da = i <= static_cast<int>(a.ndim()) - 2 ? a.shape(-2 - i) : 1;
    const int db = i <= static_cast<int>(b.ndim()) - 2 ? b.shape(-2 - i) : 1;
    per_k *= std::max(da, db);
  }
  const int64_t chunk = std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(per_k, 1), 1, K);
  std::optional<mx::array> acc;
  for (int k0 = 0; k0 < K; k0 += static_cast<int>(chunk)) {
    const int k1 = static_cast<int>(std::min<int64_t>(K, k0 + chunk));
    mx::Shape a_start(a.ndim(), 0), a_stop = a.shape();
    a_start.back() = k0;
    a_stop.back() = k1;
    mx::Shape b_start(b.ndim(), 0), b_stop = b.shape();
    b_start[b.ndim() - 2] = k0;
    b_stop[b.ndim() - 2] = k1;
    const mx::array ak = mx::expand_dims(mx::slice(a, a_start, a_stop, s), -1, s);  // [..., M, k, 1]
    const mx::array bk = mx::expand_dims(mx::slice(b, b_start, b_stop, s), -3, s);  // [..., 1, k, N]
    mx::array part = mx::astype(mx::sum(mx::multiply(ak, bk, s), -2, false, s), a.dtype(), s);
    acc = acc ? mx::add(*acc, part, s) : part;
  }
  return *acc;
}

// ---- MatMul ------------------------------------------------------------------------------------

Claim ClaimMatMul(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsFloating(t) && !IsOneOf(t, kMatmulIntTypes)) return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t) return Claim::No("inputs have different types");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  return Claim::Yes();  // ranks (>= 1, matching inner dims) are checked on the real shapes
}

std::vector<mx::array> TranslateMatMul(const OpContext& c) {
  const mx::Stream s = c.stream;
  // P @ V where P is the softmax kernel's over Q @ K^T, on a GPU (opt-in): one kernel for the three
  if (std::optional<mx::array> y = HeadsAttentionByKernel(c.input(0), c.input(1), s)) return {*y};
  return {NumpyMatmul(c, c.input(0), c.input(1), [&](const mx::array& a, const mx::array& b) {
    return IsFloating(FromMlxDtype(a.dtype())) ? FlatFreeMatmul(a, b, s) : IntegerMatmul(a, b, s);
  })};
}

// ---- Gemm --------------------------------------------------------------------------------------

Claim ClaimGemm(const NodeView& v) {
  const Node& n = v.node();
  const ElemType t = v.input_type(0);
  if (!IsFloating(t)) return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t || (v.has_input(2) && v.input_type(2) != t))
    return Claim::No("inputs have different types");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  for (const char* attr : {"transA", "transB"}) {
    const int64_t x = n.AttrInt(attr, 0);
    if (x != 0 && x != 1)
      return Claim::No(std::string("attribute ") + attr + "=" + std::to_string(x) + " not supported");
  }
  for (size_t i = 0; i < 2; ++i)
    if (auto r = v.input_rank(i); r && *r != 2)
      return Claim::No("input " + std::to_string(i) + " is not 2-D");
  return Claim::Yes();
}

std::vector<mx::array> TranslateGemm(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  mx::array a = c.input(0);
  mx::array b = c.input(1);
  if (a.ndim() != 2 || b.ndim() != 2) c.Fail("A and B must be 2-D");
  if (n.AttrInt("transA", 0)) a = mx::transpose(a, s);
  if (n.AttrInt("transB", 0)) b = mx::transpose(b, s);
  if (a.shape(1) != b.shape(0))
    c.Fail("inner dimensions differ: " + std::to_string(a.shape(1)) + " vs " + std::to_string(b.shape(0)));
  const mx::Dtype dt = a.dtype();
  const mx::Shape out_shape = {a.shape(0), b.shape(1)};
  const float alpha = n.AttrFloat("alpha", 1.f);
  const float beta = n.AttrFloat("beta", 1.f);
  const bool use_c = c.has_input(2) && beta != 0.f;
  if (use_c && mx::broadcast_shapes(c.input(2).shape(), out_shape) != out_shape)
    c.Fail("C cannot be broadcast to the output shape");

  if (a.shape(1) == 0 || a.shape(0) == 0 || b.shape(1) == 0) {
    // ORT: with K == 0 the output is C broadcast as is (beta unapplied), or zeros when beta == 0.
    if (use_c) return {mx::broadcast_to(c.input(2), out_shape, s)};
    return {mx::zeros(out_shape, dt, s)};
  }
  if (alpha == 1.f && (!use_c || beta == 1.f)) {  // 2-8 rows by a constant B on a GPU (+ a bias [N])
    const std::optional<mx::array> bias = use_c ? std::optional<mx::array>(c.input(2)) : std::nullopt;
    if (std::optional<mx::array> y = RowsProductByKernel(a, b, bias, s)) return {*y};
  }
  if (!use_c && alpha == 1.f) return {mx::matmul(a, b, s)};
  // addmm scales and adds C with the product still in its float32 accumulators (one rounding).
  const mx::array cc = use_c ? c.input(2) : mx::array(0.f, dt);
  return {mx::addmm(cc, a, b, alpha, use_c ? beta : 0.f, s)};
}

}  // namespace

bool HasUnitBatch(const mx::array& a) {
  return std::all_of(a.shape().begin(), a.shape().end() - std::min<size_t>(2, a.ndim()),
                     [](int d) { return d == 1; });
}

mx::array FlatFreeMatmul(const mx::array& a, const mx::array& b, mx::Stream s) {
  if (std::optional<mx::array> y = RowsProductByKernel(a, b, std::nullopt, s)) return *y;
  if (a.ndim() <= 2 || b.ndim() != 2) return mx::matmul(a, b, s);
  if (!HasUnitBatch(a) && s.device == mx::Device::cpu) return mx::matmul(a, b, s);
  // To a's batch dims in one Broadcast: MLX's matmul would add a second one to [1, ..., K, N].
  mx::Shape shape(a.shape().begin(), a.shape().end() - 2);
  shape.insert(shape.end(), {b.shape(0), b.shape(1)});
  return mx::matmul(a, mx::broadcast_to(b, shape, s), s);
}

mx::array NumpyMatmul(const OpContext& c, mx::array a, mx::array b, const MatmulProduct& product) {
  const mx::Stream s = c.stream;
  if (a.ndim() == 0 || b.ndim() == 0) c.Fail("MatMul operands must have rank >= 1");
  const bool a_vec = a.ndim() == 1, b_vec = b.ndim() == 1;
  if (a_vec) a = mx::expand_dims(a, 0, s);
  if (b_vec) b = mx::expand_dims(b, 1, s);
  if (a.shape(-1) != b.shape(-2))
    c.Fail("inner dimensions differ: " + std::to_string(a.shape(-1)) + " vs " + std::to_string(b.shape(-2)));

  // Output shape: broadcast batch dims + [M, N].
  mx::Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  mx::Shape out_shape = mx::broadcast_shapes(a_batch, b_batch);
  out_shape.push_back(a.shape(-2));
  out_shape.push_back(b.shape(-1));
  int64_t out_size = 1;
  for (int d : out_shape) out_size *= d;
  mx::array y = out_size == 0 || a.shape(-1) == 0 ? mx::zeros(out_shape, a.dtype(), s) : product(a, b);
  if (b_vec) y = mx::squeeze(y, -1, s);
  if (a_vec) y = mx::squeeze(y, b_vec ? -1 : -2, s);
  return y;
}

void RegisterMatmulOps(OpRegistry& r) {
  r.Add({"", "MatMul", 1, 13, ClaimMatMul, TranslateMatMul});
  r.Add({"", "Gemm", 7, 13, ClaimGemm, TranslateGemm});
}

}  // namespace mlx_ep
