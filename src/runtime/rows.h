// Row locality (docs/dynamic_shapes.md, "Bucketing the prompt"): whether a partition traced with
// the token axis of some inputs zero-padded from S to S' rows gives, in the first S rows of its
// outputs, exactly what it gives for the unpadded inputs. The tracker follows one trace node by
// node, with the real shapes, and proves it or names the node that breaks it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/plan.h"

namespace mlx_ep {

/** A value of the padded trace, compared with the same value of the unpadded one. */
struct RowState {
  enum class Kind {
    kSame,     ///< equal in both traces (shapes and elements)
    kRows,     ///< the token axis `axis` is S' here, S there; the first S rows are equal
    kLength,   ///< a scalar: the padded length (S' here, S there)
    kShape,    ///< a 1-D integer vector: `positions` hold the padded length, the rest is equal
    kInPlace,  ///< a partition output updated in place whose new rows are along `axis`
    kDiffers,  ///< anything else: no use of it can be exact
  };
  Kind kind = Kind::kSame;
  int axis = -1;
  bool zero_rows = false;          ///< kRows: the padding rows are zeros (as the runner pads inputs)
  std::vector<int64_t> positions;  ///< kShape
};

/** Follows one trace of a plan whose inputs are padded along `token_axes` (per plan input: the
 *  axis, or -1). Observe every top-level node in order, then Finish. */
class RowTracker {
 public:
  RowTracker(const Plan& plan, const std::vector<int>& token_axes);

  /** Notes node `pn`'s outputs. `in`: its inputs' arrays (nullopt where absent), `host`: their
   *  host values where the trace knows them. */
  void Observe(const PlanNode& pn, const std::vector<std::optional<mx::array>>& in,
               const std::vector<std::shared_ptr<const Tensor>>& host, const std::vector<mx::array>& outs);

  /** After the last node, with the in-place outputs the trace accepted: per plan output the axis
   *  whose first S rows are the unpadded output's (-1: the output is equal whole; an in-place
   *  output: its rows' axis), or nullopt when some output may differ (refusal() says why). */
  std::optional<std::vector<int>> Finish(const std::vector<InPlaceOutput>& in_place);

  /** Why the padding is not exact: the first node that made a value differ, or the output. */
  const std::string& refusal() const { return refusal_; }

 private:
  RowState State(const std::string& name) const;
  /** Marks every output of `pn` kDiffers, noting `why` if nothing was refused yet. */
  std::vector<RowState> Differs(const PlanNode& pn, const std::string& why);
  std::vector<RowState> Apply(const PlanNode& pn, const std::vector<RowState>& st,
                              const std::vector<std::optional<mx::array>>& in,
                              const std::vector<std::shared_ptr<const Tensor>>& host,
                              const std::vector<mx::array>& outs);

  const Plan& plan_;
  std::unordered_map<std::string, RowState> states_;  // values that are not kSame
  std::string refusal_;
};

}  // namespace mlx_ep
