#include "ops/registry.h"

#include <stdexcept>

namespace mlx_ep {

void OpRegistry::Add(OpSpec spec) {
  for (const auto& s : specs_) {
    if (s.domain == spec.domain && s.op_type == spec.op_type && s.since <= spec.until &&
        spec.since <= s.until)
      throw std::logic_error("[MlxEp] overlapping registry entries for " + spec.op_type);
  }
  specs_.push_back(std::move(spec));
}

const OpSpec* OpRegistry::Find(const std::string& domain, const std::string& op_type,
                               int since_version) const {
  // "ai.onnx" and "" name the same domain.
  const std::string d = domain == "ai.onnx" ? "" : domain;
  for (const auto& s : specs_)
    if (s.domain == d && s.op_type == op_type && s.since <= since_version && since_version <= s.until)
      return &s;
  for (const auto& s : specs_)
    if (s.domain == d && !s.op_type.empty() && s.op_type.back() == '*' &&
        op_type.compare(0, s.op_type.size() - 1, s.op_type, 0, s.op_type.size() - 1) == 0 &&
        s.since <= since_version && since_version <= s.until)
      return &s;
  return nullptr;
}

const OpRegistry& OpRegistry::Get() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    RegisterArithmeticOps(r);
    RegisterLogicalOps(r);
    RegisterUnaryOps(r);
    RegisterReductionOps(r);
    RegisterMatmulOps(r);
    RegisterConvOps(r);
    RegisterNormalizationOps(r);
    RegisterImageNormalizationOps(r);
    RegisterExtraActivationOps(r);
    RegisterRecurrentOps(r);
    RegisterPoolOps(r);
    RegisterShapeOps(r);
    RegisterTensorOps(r);
    RegisterIndexingOps(r);
    RegisterEinsumOps(r);
    RegisterAttentionOps(r);
    RegisterAttentionVjpOps(r);
    RegisterResizeOps(r);
    RegisterPadOps(r);
    RegisterSignalOps(r);
    RegisterRotaryEmbeddingOps(r);
    RegisterTensorMiscOps(r);
    RegisterContribNormalizationOps(r);
    RegisterContribActivationOps(r);
    RegisterContribMatmulOps(r);
    RegisterQuantizedOps(r);
    RegisterGroupQueryAttentionOps(r);
    RegisterPagedAttentionOps(r);
    RegisterContribAttentionOps(r);
    RegisterControlFlowOps(r);
    return r;
  }();
  return registry;
}

}  // namespace mlx_ep
