#include "runtime/rows.h"

#include <algorithm>
#include <set>

#include "runtime/rows_rules.h"

namespace mlx_ep {

using rows_rules::Kind;
using rows_rules::Outcome;
using rows_rules::RowNode;
using rows_rules::Rule;
using rows_rules::RuleFor;
using rows_rules::Rows;

RowTracker::RowTracker(const Plan& plan, const std::vector<int>& token_axes) : plan_(plan) {
  for (size_t i = 0; i < token_axes.size() && i < plan.input_names.size(); ++i)
    if (token_axes[i] >= 0) states_[plan.input_names[i]] = Rows(token_axes[i], /*zero=*/true);
}

RowState RowTracker::State(const std::string& name) const {
  auto it = states_.find(name);
  return it == states_.end() ? RowState{} : it->second;
}

std::vector<RowState> RowTracker::Differs(const PlanNode& pn, const std::string& why) {
  if (refusal_.empty() && !why.empty()) refusal_ = pn.node.Label() + " (" + pn.node.op_type + ") " + why;
  RowState s;
  s.kind = Kind::kDiffers;
  return std::vector<RowState>(pn.node.outputs.size(), s);
}

std::vector<RowState> RowTracker::Apply(const PlanNode& pn, const std::vector<RowState>& st,
                                        const std::vector<std::optional<mx::array>>& in,
                                        const std::vector<std::shared_ptr<const Tensor>>& host,
                                        const std::vector<mx::array>& outs) {
  const bool all_same =
      std::all_of(st.begin(), st.end(), [](const RowState& s) { return s.kind == Kind::kSame; });
  for (const std::string& name : pn.node.implicit_inputs)
    if (State(name).kind != Kind::kSame)
      return Differs(pn, "a body reads a value that depends on the prompt");
  if (all_same) return std::vector<RowState>(pn.node.outputs.size());
  if (std::any_of(st.begin(), st.end(), [](const RowState& s) { return s.kind == Kind::kDiffers; }))
    return Differs(pn, "");
  if (std::any_of(st.begin(), st.end(), [](const RowState& s) { return s.kind == Kind::kInPlace; }))
    return Differs(pn, "reads an output updated in place");
  const Rule* rule = RuleFor(pn.node);
  if (!rule) return Differs(pn, "is not known to keep rows apart");
  Outcome o = (*rule)(RowNode{pn, st, in, host, outs});
  if (!o.why.empty()) return Differs(pn, o.why);
  o.out.resize(pn.node.outputs.size());
  return o.out;
}

void RowTracker::Observe(const PlanNode& pn, const std::vector<std::optional<mx::array>>& in,
                         const std::vector<std::shared_ptr<const Tensor>>& host,
                         const std::vector<mx::array>& outs) {
  std::vector<RowState> st;
  for (const std::string& name : pn.node.inputs) st.push_back(State(name));
  const std::vector<RowState> out = Apply(pn, st, in, host, outs);
  for (size_t k = 0; k < pn.node.outputs.size() && k < out.size(); ++k) {
    if (pn.node.outputs[k].empty()) continue;
    if (out[k].kind == Kind::kSame)
      states_.erase(pn.node.outputs[k]);
    else
      states_[pn.node.outputs[k]] = out[k];
  }
}

std::optional<std::vector<int>> RowTracker::Finish(const std::vector<InPlaceOutput>& in_place) {
  std::vector<int> axes;
  for (size_t k = 0; k < plan_.output_names.size(); ++k) {
    const std::string& name = plan_.output_names[k];
    const RowState s = State(name);
    auto e =
        std::find_if(in_place.begin(), in_place.end(), [&](const InPlaceOutput& p) { return p.output == k; });
    if (e != in_place.end() && State(plan_.input_names.at(e->input)).kind != Kind::kSame) {
      if (refusal_.empty()) refusal_ = "output '" + name + "' updates an input that holds the prompt";
      return std::nullopt;
    }
    if (s.kind == Kind::kSame || s.kind == Kind::kRows) {
      axes.push_back(s.axis);
    } else if (s.kind == Kind::kInPlace && e != in_place.end() && e->axis == s.axis) {
      axes.push_back(s.axis);
    } else {
      if (refusal_.empty())
        refusal_ = "output '" + name + "' " +
                   (s.kind == Kind::kInPlace ? "is not updated in place" : "depends on the padded length");
      return std::nullopt;
    }
  }
  return axes;
}

}  // namespace mlx_ep
