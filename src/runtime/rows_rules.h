// The rules of RowTracker (runtime/rows.h), one per op family: what a node makes of its inputs'
// row states. Internal to rows.cc and rows_rules.cc.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/rows.h"

namespace mlx_ep::rows_rules {

using Kind = RowState::Kind;

/** One node as the tracker sees it. */
struct RowNode {
  const PlanNode& pn;
  const std::vector<RowState>& st;  // per input of pn.node.inputs
  const std::vector<std::optional<mx::array>>& in;
  const std::vector<std::shared_ptr<const Tensor>>& host;
  const std::vector<mx::array>& outs;

  const Node& node() const { return pn.node; }
  bool Present(size_t i) const { return i < in.size() && in[i].has_value(); }
  int Rank(size_t i) const { return Present(i) ? in[i]->ndim() : -1; }
  Kind KindOf(size_t i) const { return i < st.size() ? st[i].kind : Kind::kSame; }
  /** Input i's integer elements when the trace knows them and they are equal in both traces. */
  std::optional<std::vector<int64_t>> SameInts(size_t i) const {
    if (i >= host.size() || !host[i] || KindOf(i) != Kind::kSame) return std::nullopt;
    return host[i]->ToInt64();
  }
};

/** The node's output states, or why the padding is not exact there. */
struct Outcome {
  std::vector<RowState> out;
  std::string why;
};

/** kRows along `axis`; `zero`: the padding rows are zeros. */
RowState Rows(int axis, bool zero = false);

using Rule = std::function<Outcome(const RowNode&)>;

/** The rule of `node`'s op, or nullptr (an op not known to keep rows apart). */
const Rule* RuleFor(const Node& node);

}  // namespace mlx_ep::rows_rules
