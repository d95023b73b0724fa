// Op family: binary arithmetic with ONNX (numpy) broadcasting.
#include "ops/claim_util.h"
#include "ops/registry.h"

namespace mlx_ep {
namespace {

Claim ClaimSameTypeBinary(const NodeView& v) {
  const ElemType t = v.input_type(0);
  if (!IsNumeric(t)) return Claim::No(TypeReason(v, 0));
  if (v.input_type(1) != t) return Claim::No("inputs have different types");
  return Claim::Yes();
}

std::vector<mx::array> TranslateAdd(const OpContext& c) {
  return {mx::add(c.input(0), c.input(1), c.stream)};
}

}  // namespace

void RegisterArithmeticOps(OpRegistry& r) {
  r.Add({"", "Add", 7, 14, ClaimSameTypeBinary, TranslateAdd});
}

}  // namespace mlx_ep
