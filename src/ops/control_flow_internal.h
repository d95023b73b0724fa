// Helpers shared by the control-flow ops (If, Loop, Scan): their bodies are traced inline into
// the enclosing MLX function, so what must be known while tracing is checked at claim time.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ops/op.h"

namespace mlx_ep {

/** Iterations a Loop or Scan may unroll into one traced function. */
inline constexpr int64_t kMaxUnrolledIterations = 4096;

/** Maps host roots of a body to the node's host inputs: an outer-scope root becomes its implicit
 *  input's index (past the explicit inputs); a root in `body_inputs` is known while unrolling.
 *  Appends to the claim's host_inputs (and fold_inputs when `must_fold`); returns a reason when
 *  a root is neither. */
std::string AddHostRoots(const NodeView& view, const std::set<std::string>& roots,
                         const std::set<std::string>& body_inputs, const char* what, Claim& claim,
                         bool must_fold = false);

/** Adds input `index` to the claim's host_inputs (and fold_inputs when `must_fold`), once. */
void AddHostInput(Claim& claim, size_t index, bool must_fold);

/** Adds the body's host roots (as host inputs) and fold roots (as fold inputs) to the claim. */
std::string AddBodyRoots(const NodeView& view, const SubgraphFacts& facts,
                         const std::set<std::string>& body_inputs, Claim& claim);

/** A scalar both as an array and on the host lane (a Loop's iteration number and condition). */
TracedValue HostScalarValue(int64_t v, ElemType type);

/** Stacks per-iteration values along `axis` (a new axis). With no iterations, `empty_like`
 *  gives the per-iteration shape and dtype and the result has extent 0 there. */
mx::array StackIterations(const OpContext& c, const std::vector<mx::array>& steps, int axis,
                          const mx::array& empty_like);

}  // namespace mlx_ep
