// Op family: ONNX Runtime's contrib FusedMatMul and TransposeMatMul (com.microsoft 1): Y = alpha * op(A) @
// op(B), as ORT 1.31's CPU kernel (MatMulComputeHelper) defines op():
//
//  - transBatch = 0: the matrix is the last two dims; trans swaps them. Batch dims broadcast (numpy).
//  - transBatch = 1 (both inputs then have the same rank >= 3, ORT's rule): X = [d0, d1, ..,
//    d(r-2), d(r-1)] is read as the batch [d1 .. d(r-2)] of [d0, d(r-1)] matrices (permutation
//    [1 .. r-2, 0, r-1]); with trans also set, of [d(r-1), d0] matrices ([1 .. r-2, r-1, 0]).
//    Measured against ORT's kernel for every combination on rank 3 and 4.
//
// ORT computes float32 (float16 runs as float32 between inserted Casts) and scales by alpha in its
// GEMM. float16/bfloat16: with alpha == 1 MLX's matmul accumulates in float32 and rounds once; with
// another alpha the product is computed in float32, scaled and rounded once. float64 is declined.
// A trans flag on a 1-D operand is declined (no matrix to transpose).
#include "ops/claim_util.h"
#include "ops/matmul_internal.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

/** The permutation op() applies to a rank-`rank` operand, or empty for none. */
std::vector<int> OperandPerm(int rank, bool trans, bool trans_batch) {
  if (!trans && !trans_batch) return {};
  std::vector<int> perm;
  if (trans_batch) {
    for (int i = 1; i < rank - 1; ++i) perm.push_back(i);
    perm.push_back(trans ? rank - 1 : 0);
    perm.push_back(trans ? 0 : rank - 1);
    return perm;
  }
  for (int i = 0; i < rank - 2; ++i) perm.push_back(i);
  perm.push_back(rank - 1);
  perm.push_back(rank - 2);
  return perm;
}

Claim ClaimFusedMatMul(const NodeView& v) {
  const Node& n = v.node();
  const ElemType t = v.input_type(0);
  if (!IsOneOf(t, {ElemType::kFloat, ElemType::kFloat16, ElemType::kBFloat16}))
    return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t) return Claim::No("inputs have different types");
  if (v.output_type(0) != t) return Claim::No("output type differs from the input type");
  for (const char* attr : {"transA", "transB", "transBatchA", "transBatchB"}) {
    const int64_t x = n.AttrInt(attr, 0);
    if (x != 0 && x != 1)
      return Claim::No(std::string("attribute ") + attr + "=" + std::to_string(x) + " not supported");
  }
  const char* trans[] = {"transA", "transB"};
  for (size_t i = 0; i < 2; ++i) {
    const auto r = v.input_rank(i);
    if (!r) return Claim::No("input " + std::to_string(i) + " has an unknown rank");
    if (*r < 2 && n.AttrInt(trans[i], 0)) return Claim::No(std::string(trans[i]) + " on a 1-D input");
  }
  return Claim::Yes();
}

std::vector<mx::array> TranslateFusedMatMul(const OpContext& c) {
  const Node& n = c.node;
  const mx::Stream s = c.stream;
  mx::array a = c.input(0);
  mx::array b = c.input(1);
  const bool batch_a = n.AttrInt("transBatchA", 0), batch_b = n.AttrInt("transBatchB", 0);
  if ((batch_a || batch_b) && (a.ndim() < 3 || a.ndim() != b.ndim()))
    c.Fail("with transBatchA/transBatchB both inputs must have the same rank >= 3");
  if (a.ndim() == 0 || b.ndim() == 0) c.Fail("operands must have rank >= 1");
  const int rank_a = static_cast<int>(a.ndim()), rank_b = static_cast<int>(b.ndim());
  if (auto p = OperandPerm(rank_a, n.AttrInt("transA", 0) && rank_a >= 2, batch_a); !p.empty())
    a = mx::transpose(a, p, s);
  if (auto p = OperandPerm(rank_b, n.AttrInt("transB", 0) && rank_b >= 2, batch_b); !p.empty())
    b = mx::transpose(b, p, s);

  const float alpha = n.AttrFloat("alpha", 1.f);
  return {NumpyMatmul(c, a, b, [&](const mx::array& x, const mx::array& y) {
    if (alpha == 1.f) return FlatFreeMatmul(x, y, s);
    // Scaled in float32 before the one rounding (ORT's GEMM applies alpha to its float sums).
    const mx::array p = mx::matmul(mx::astype(x, mx::float32, s), mx::astype(y, mx::float32, s), s);
    return mx::astype(mx::multiply(p, mx::array(alpha, mx::float32), s), x.dtype(), s);
  })};
}

}  // namespace

void RegisterContribMatmulOps(OpRegistry& r) {
  r.Add({"com.microsoft", "FusedMatMul", 1, 1, ClaimFusedMatMul, TranslateFusedMatMul});
  // FusedMatMul's former name, kept by ORT for old models (the same kernel).
  r.Add({"com.microsoft", "TransposeMatMul", 1, 1, ClaimFusedMatMul, TranslateFusedMatMul});
}

}  // namespace mlx_ep
