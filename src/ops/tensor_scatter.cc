// Op family: tensor (selection). TensorScatter (24), registered from RegisterTensorOps (tensor.cc):
// the KV-cache update of opset 24's attention graphs. present = past_cache with `update` written
// along `axis` from each batch entry's write index (0 without write_indices; modulo the cache's
// length in "circular" mode), as ORT's CPU kernel (onnxruntime/core/providers/cpu/llm/
// tensorscatter.cc). It only moves data: every type MLX holds is exact. ORT's errors (a negative
// write index; in linear mode an update running past the cache) fail the run after evaluation
// (OpContext::Require); the evaluation itself writes in bounds.
#include <string>
#include <vector>

#include "ops/claim_util.h"
#include "ops/registry.h"
#include "ops/tensor_internal.h"

namespace mlx_ep {
namespace {

Claim ClaimTensorScatter(const NodeView& v) {
  if (std::optional<Claim> no = DeclineUnknownAttributes(v.node(), {"axis", "mode"})) return *no;
  const std::string mode = v.node().AttrString("mode", "linear");
  if (mode != "linear" && mode != "circular") return Claim::No("unknown mode '" + mode + "'");
  if (!v.has_input(0) || !v.has_input(1)) return Claim::No("inputs past_cache/update are missing");
  if (v.has_input(2) && v.input_type(2) != ElemType::kInt64)
    return Claim::No(TypeReason(v, 2, "write_indices"));
  return Claim::Yes();
}

std::vector<mx::array> TranslateTensorScatter(const OpContext& c) {
  const mx::array& past = c.input(0);
  const mx::array& update = c.input(1);
  const mx::Stream s = c.stream;
  const int ndim = static_cast<int>(past.ndim());
  if (ndim < 2 || static_cast<int>(update.ndim()) != ndim)
    c.Fail("past_cache and update need the same rank >= 2");
  int axis = static_cast<int>(c.node.AttrInt("axis", -2));
  if (axis < 0) axis += ndim;
  if (axis <= 0 || axis >= ndim) c.Fail("axis must lie in [1, rank - 1]");
  const int length = past.shape(axis), sequence = update.shape(axis);
  if (sequence > length) c.Fail("update's sequence_length exceeds max_sequence_length");
  for (int d = 0; d < ndim; ++d)
    if (d != axis && past.shape(d) != update.shape(d))
      c.Fail("past_cache and update differ in dim " + std::to_string(d));
  if (update.size() == 0) return {past};
  const bool circular = c.node.AttrString("mode", "linear") == "circular";
  if (!c.has_input(2)) {  // every write index 0: one slice, in linear and circular mode alike
    mx::Shape start(ndim, 0);
    return {mx::slice_update(past, update, start, update.shape(), s)};
  }
  const mx::array& write = c.input(2);
  const int batch = past.shape(0);
  if (write.ndim() != 1 || write.shape(0) != batch) c.Fail("write_indices must have shape [batch_size]");
  c.Require(mx::greater_equal(write, mx::array(int64_t{0}), s), "write_indices must not be negative");
  mx::array w = mx::maximum(write, mx::array(int64_t{0}), s);
  if (circular) {
    w = mx::remainder(w, mx::array(static_cast<int64_t>(length)), s);
  } else {
    c.Require(mx::less_equal(write, mx::array(static_cast<int64_t>(length - sequence)), s),
              "write_indices + sequence_length exceeds max_sequence_length (linear mode)");
    w = mx::minimum(w, mx::array(static_cast<int64_t>(length - sequence)), s);
  }
  // positions [batch, 1..., sequence, 1...]: write index + s (wrapped in circular mode)
  mx::Shape w_shape(ndim, 1), s_shape(ndim, 1);
  w_shape[0] = batch;
  s_shape[axis] = sequence;
  mx::array positions = mx::add(mx::reshape(mx::astype(w, mx::int32, s), w_shape, s),
                                mx::reshape(mx::arange(sequence, mx::int32, s), s_shape, s), s);
  if (circular) positions = mx::remainder(positions, mx::array(length), s);
  positions = mx::broadcast_to(positions, update.shape(), s);
  return {mx::put_along_axis(past, positions, update, axis, s)};
}

}  // namespace

void RegisterTensorScatterOps(OpRegistry& r) {
  r.Add({"", "TensorScatter", 24, 28, ClaimTensorScatter, TranslateTensorScatter});
}

}  // namespace mlx_ep
