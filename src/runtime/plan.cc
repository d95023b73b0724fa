#include "runtime/plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <typeinfo>

#include "common/error.h"
#include "mlx/primitives.h"
#include "ops/matmul_internal.h"
#include "runtime/matmul_bias.h"
#include "runtime/matmul_siblings.h"
#include "runtime/nbits_siblings.h"
#include "runtime/plan_trace.h"
#include "runtime/rows.h"

namespace mlx_ep {
namespace trace_internal {

// Catches translation bugs at the node that has them, not as a wrong number downstream. Only the
// element type: a declared static shape may be stale (exporters stamp them, ORT only warns when
// a produced value disagrees), so the real shape wins, as on ORT's CPU EP.
void CheckOutput(const Plan& plan, const PlanNode& pn, size_t k, const mx::array& a) {
  const std::string& name = pn.node.outputs[k];
  auto t = plan.value_types.find(name);
  if (t != plan.value_types.end() && FromMlxDtype(a.dtype()) != t->second)
    throw std::logic_error("[MlxEp][" + pn.node.op_type + "] " + pn.node.Label() + ": output " +
                           std::to_string(k) + " is " + ElemName(FromMlxDtype(a.dtype())) + ", expected " +
                           ElemName(t->second));
}

// Bytes of `a`, saturating instead of wrapping for absurd shapes.
size_t ByteSize(const mx::array& a) {
  size_t n = a.itemsize();
  for (int d : a.shape()) {
    if (d > 0 && n > std::numeric_limits<size_t>::max() / static_cast<size_t>(d))
      return std::numeric_limits<size_t>::max();
    n *= static_cast<size_t>(std::max(d, 0));
  }
  return n;
}

// MLX's CPU allocator returns a null buffer when malloc fails and its kernels then write through
// it (SIGSEGV). So reserve what a trace needs before anything is evaluated: if the address space
// cannot hold it, fail like ORT's CPU EP ("Failed to allocate memory") instead of dying. Large
// malloc()s are mmap()s that touch no page, so the probe costs microseconds.
void EnsureAllocatable(size_t bytes, const std::string& what) {
  constexpr size_t kProbeFrom = size_t{16} << 20;  // below this, ORT's own buffers fail first
  if (bytes < kProbeFrom) return;
  void* p = bytes == std::numeric_limits<size_t>::max() ? nullptr : std::malloc(bytes);
  if (!p)
    throw OutOfMemoryError("[MlxEp] Failed to allocate memory: " + what + " needs " + std::to_string(bytes) +
                           " bytes");
  std::free(p);
}

namespace {

// True when `a` and `b` compute the same values by the rule mx::compile's simplification merges
// by (one array; equal one-element leaves; primitives of one type, equivalent, over inputs that
// are the same computations), followed to a small depth: each layer's GroupQueryAttention
// computes its in-place offsets anew from the same seqlens_k.
bool SameComputation(const mx::array& a, const mx::array& b, int depth = 0) {
  if (a.id() == b.id()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (!a.has_primitive() && !b.has_primitive()) {
    return a.size() == 1 && a.is_available() && b.is_available() && a.data<void>() && b.data<void>() &&
           std::memcmp(a.data<void>(), b.data<void>(), a.nbytes()) == 0;
  }
  constexpr int kMaxDepth = 8;
  if (depth >= kMaxDepth || !a.has_primitive() || !b.has_primitive() || !a.siblings().empty() ||
      !b.siblings().empty() || a.inputs().size() != b.inputs().size())
    return false;
  const mx::Primitive &pa = a.primitive(), &pb = b.primitive();
  if (typeid(pa) != typeid(pb) || !pa.is_equivalent(pb)) return false;
  for (size_t i = 0; i < a.inputs().size(); ++i)
    if (!SameComputation(a.inputs()[i], b.inputs()[i], depth + 1)) return false;
  return true;
}

}  // namespace

// A row-contiguous host copy of an array that does not depend on the traced inputs.
std::shared_ptr<const Tensor> ToHostTensor(const mx::array& a, mx::Stream stream) {
  mx::array c = mx::contiguous(a, false, stream);
  mx::eval(c);
  auto t = std::make_shared<Tensor>();
  t->type = FromMlxDtype(c.dtype());
  t->shape.assign(c.shape().begin(), c.shape().end());
  const auto* p = c.data<uint8_t>();
  t->bytes.assign(p, p + c.nbytes());
  return t;
}

// A body's inputs: arrays and, where the enclosing translation knows them, host values.
void PlanTrace::BindTraced(const std::vector<TracedValue>& inputs) {
  if (inputs.size() != plan_.input_names.size())
    throw std::invalid_argument("[MlxEp] subgraph " + plan_.name + " takes " +
                                std::to_string(plan_.input_names.size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    Note(inputs[i].array);
    values_.insert_or_assign(plan_.input_names[i], inputs[i].array);
    if (inputs[i].host) host_[plan_.input_names[i]] = inputs[i].host;
  }
}

std::vector<TracedValue> PlanTrace::TracedOutputs() const {
  std::vector<TracedValue> outputs;
  for (const auto& name : plan_.output_names) outputs.push_back({*Array(name), Host(name)});
  return outputs;
}

void PlanTrace::BindInputs(const std::vector<mx::array>& inputs, const std::vector<const Tensor*>& host) {
  for (size_t i = 0; i < plan_.input_names.size(); ++i) {
    Note(inputs.at(i));
    values_.insert_or_assign(plan_.input_names[i], inputs[i]);
    // Non-owning: the runner keeps host inputs alive as long as the traced function.
    if (host.at(i))
      host_[plan_.input_names[i]] = std::shared_ptr<const Tensor>(std::shared_ptr<void>(), host[i]);
  }
  if (dyn_) BindDynamic();
}

void PlanTrace::Run(const PlanNode& pn) {
  if (dyn_) {
    if (skip_.count(ran_)) {  // a prologue node: its values the rest reads are bound already
      Release(ran_++, pn);
      return;
    }
    try {
      if (RunDynamic(pn)) return;
    } catch (DynamicShapeUnsupported& e) {
      if (e.symbols.empty()) e.symbols = DepsOf(pn);
      throw;
    }
  }
  bool fold = CanFold(pn);
  if (pn.must_fold && !fold)
    throw std::logic_error("[MlxEp] " + pn.node.Label() +
                           ": an input has no host value, so the node cannot fold");
  const size_t checks_before = check_sink_->size();
  node_updates_.clear();
  std::optional<OpContext> ctx(Context(pn, fold));
  std::vector<mx::array> outs = fold ? pn.spec->translate(*ctx) : TranslateTraced(pn, *ctx);
  if (fold && !pn.must_fold && TooLargeToFold(outs)) {
    // A large value nobody needs on the host stays an MLX computation (a broadcast full()
    // is cheaper than a dense constant); nothing was evaluated yet.
    fold = false;
    check_sink_->erase(check_sink_->begin() + checks_before, check_sink_->end());
    node_updates_.clear();
    ctx.emplace(Context(pn, false));
    outs = pn.spec->translate(*ctx);
  }
  for (InPlaceUpdate& u : node_updates_) AcceptInPlace(pn, outs, std::move(u));
  node_updates_.clear();
  if (fold) RunChecksNow(checks_before);
  const auto& host_outputs = ctx->host_outputs();
  CheckOutputCount(pn, outs);
  if (fold && info_) ++info_->folded;
  for (size_t k = 0; k < pn.node.outputs.size() && k < outs.size(); ++k) {
    const std::string& name = pn.node.outputs[k];
    if (name.empty()) continue;
    if (fold) {
      EnsureAllocatable(ByteSize(outs[k]), pn.node.Label() + " (" + pn.node.op_type + ") folded on the host");
      auto host = ToHostTensor(outs[k], host_stream_);
      outs[k] = ToArray(*host);  // a constant of the traced graph
      host_[name] = std::move(host);
    } else if (k < host_outputs.size() && host_outputs[k]) {
      host_[name] = host_outputs[k];  // a body computed it on its host lane
    }
    CheckOutput(plan_, pn, k, outs[k]);
    Note(outs[k]);
    Count(pn, name, ByteSize(outs[k]));
    values_.insert_or_assign(name, outs[k]);
  }
  if (info_ && info_->rows && !parent_) ObserveRows(pn, outs);
  Release(ran_++, pn);
}

std::vector<mx::array> PlanTrace::TranslateTraced(const PlanNode& pn, const OpContext& c) {
  if (pn.merged) return {MergedColumnsOf(pn, c)};
  if (pn.merged_nbits) return {MergedNBitsOf(pn)};
  if (pn.bias_added_to && biased_.count(*pn.bias_added_to)) return {*Array(*pn.bias_added_to)};
  if (pn.bias)
    if (auto y = BiasedProduct(c.input(0), c.input(1), *Array(*pn.bias), stream_)) {
      biased_.insert(pn.node.outputs[0]);
      return {*y};
    }
  return pn.spec->translate(c);
}

/** Merged group member `pn`'s output: the part of its group's columns at `column`, `width` wide. */
static mx::array PartAt(const std::map<int64_t, mx::array>& columns, const PlanNode& pn, int64_t column,
                        int64_t width) {
  const auto part = columns.find(column);
  if (part == columns.end() || part->second.shape(-1) != width)
    throw std::logic_error("[MlxEp] " + pn.node.Label() + ": no merged columns at " + std::to_string(column));
  return part->second;
}

mx::array PlanTrace::MergedColumnsOf(const PlanNode& pn, const OpContext& c) {
  const MergedColumns& m = *pn.merged;
  auto it = merged_products_.find(m.weight);
  if (it == merged_products_.end()) {  // the group's first MatMul: the one product
    const mx::array weights = *ConstantView(plan_, m.weight, stream_);
    std::optional<mx::array> product;
    if (!m.bias.empty() && (product = BiasedProduct(c.input(0), weights, *Array(m.bias), stream_)))
      merged_biased_.insert(m.weight);
    auto product_of = [&](const mx::array& a, const mx::array& b) { return FlatFreeMatmul(a, b, stream_); };
    if (!product) product = NumpyMatmul(c, c.input(0), weights, product_of);
    std::set<int64_t> starts;
    for (const PlanNode& member : plan_.nodes)
      if (member.merged && member.merged->weight == m.weight) starts.insert(member.merged->column);
    it = merged_products_.emplace(m.weight, MemberColumns(starts, *product, true)).first;
  }
  if (merged_biased_.count(m.weight)) biased_.insert(pn.node.outputs[0]);
  return PartAt(it->second, pn, m.column, m.width);
}

mx::array PlanTrace::MergedNBitsOf(const PlanNode& pn) {
  const MergedNBits& m = *pn.merged_nbits;
  auto it = merged_products_.find(m.weight);
  if (it == merged_products_.end()) {  // the group's first MatMulNBits: the group's node, once
    PlanNode group = pn;
    group.merged_nbits.reset();
    group.node.inputs = {pn.node.inputs.at(0), m.weight, m.scales};
    if (!m.zero_points.empty()) group.node.inputs.push_back(m.zero_points);
    group.node.attributes["N"].i = m.total;
    const OpContext c = Context(group, false);
    const mx::array product = pn.spec->translate(c).at(0);
    std::set<int64_t> starts;
    for (const PlanNode& member : plan_.nodes)
      if (member.merged_nbits && member.merged_nbits->weight == m.weight)
        starts.insert(member.merged_nbits->column);
    // Plain views: what reads them (the EP's nbits kernels, SiLU's product of them) takes a row
    // whose unit axes' strides are not packed without a copy, unlike MLX's matmul (ColumnParts),
    // and the packing's Reshapes would cost three primitives a group.
    it = merged_products_.emplace(m.weight, MemberColumns(starts, product, false)).first;
  }
  return PartAt(it->second, pn, m.column, m.width);
}

std::map<int64_t, mx::array> PlanTrace::MemberColumns(const std::set<int64_t>& member_starts,
                                                      const mx::array& product, bool packed) {
  // The members' columns tile the product (MergeColumns puts their weights side by side): one
  // Split primitive makes all their views, where a Slice each took a primitive each a run (44 a
  // TinyLlama decode step, gate and up; on a GPU every primitive costs host time); ColumnParts
  // gives one row's views packed strides.
  std::set<int64_t> starts = member_starts;
  starts.insert(0);
  mx::Shape indices;
  for (int64_t start : starts)
    if (start > 0) indices.push_back(static_cast<int>(start));
  const std::vector<mx::array> parts =
      packed ? ColumnParts(product, indices, stream_) : mx::split(product, indices, -1, stream_);
  std::map<int64_t, mx::array> columns;
  auto start = starts.begin();
  for (const mx::array& part : parts) columns.emplace(*start++, part);
  return columns;
}

void PlanTrace::ObserveRows(const PlanNode& pn, const std::vector<mx::array>& outs) {
  std::vector<std::optional<mx::array>> in;
  std::vector<std::shared_ptr<const Tensor>> host;
  for (const std::string& name : pn.node.inputs) {
    in.push_back(Array(name));
    host.push_back(Host(name));
  }
  info_->rows->Observe(pn, in, host, outs);
}

std::vector<mx::array> PlanTrace::Outputs() {
  std::vector<mx::array> outputs;
  for (const auto& name : plan_.output_names) {
    if (dyn_shaped_.count(name))
      throw DynamicShapeUnsupported("[MlxEp] partition output '" + name + "' has a dynamic shape",
                                    deps_[name]);
    outputs.push_back(mx::contiguous(*Array(name), false, stream_));
    bytes_ = std::max(bytes_, live_ = SaturatingAdd(live_, ByteSize(outputs.back())));  // ORT's copy
  }
  EnsureAllocatable(bytes_, "partition " + plan_.name + " (largest value: output of " + largest_ + ", " +
                                std::to_string(largest_bytes_) + " bytes)");
  if (!check_sink_->empty()) outputs.push_back(FirstFailedCheck());
  // The rows as they are: the device writes copy strided rows themselves (their kernels ensure
  // row-contiguous inputs) and the host's writes make them contiguous when they are not
  // (runner_in_place.cc), so a decode step no longer evaluates a Contiguous per K/V row. The
  // offsets once per distinct computation: a decoder's layers compute the same one (a TinyLlama
  // step's 44 offsets outputs and their Reshapes become one).
  std::vector<std::pair<mx::array, size_t>> offsets_at;  // each distinct computation, its output
  for (auto& [where, u] : in_place_) {
    where.rows = outputs.size();
    outputs.push_back(u.rows);
    const mx::array& offsets = u.offsets;  // a lambda may not capture a structured binding (C++17)
    auto same = std::find_if(offsets_at.begin(), offsets_at.end(),
                             [&](const auto& seen) { return SameComputation(seen.first, offsets); });
    if (same == offsets_at.end()) {
      same = offsets_at.emplace(offsets_at.end(), offsets, outputs.size());
      // [B] already (GroupQueryAttention's): no Reshape primitive of the same shape.
      const bool flat = offsets.ndim() == 1 && offsets.has_primitive();
      outputs.push_back(mx::astype(flat ? offsets : mx::reshape(offsets, {-1}, stream_), mx::int32, stream_));
    }
    where.offsets = same->second;
    if (info_) info_->in_place.push_back(where);
  }
  return outputs;
}

// Traces body `attr` of `pn` inline, resolving its outer-scope names against this trace.
std::vector<TracedValue> PlanTrace::TraceBody(const PlanNode& pn, const std::string& attr,
                                              const std::vector<TracedValue>& inputs) const {
  auto it = pn.subplans.find(attr);
  if (it == pn.subplans.end())
    throw std::logic_error("[MlxEp] " + pn.node.Label() + " has no subgraph '" + attr + "'");
  PlanTrace body(*it->second, stream_, info_, this);
  body.BindTraced(inputs);
  for (const PlanNode& node : it->second->nodes) body.Run(node);
  return body.TracedOutputs();
}

// The node's context. A folding node reads host values (as CPU arrays) and runs on MLX's
// CPU device, so nothing of it is traced; Shape and Size read only their inputs' shapes.
// `with_hints`: trace values count as host values (HintOutputs).
OpContext PlanTrace::Context(const PlanNode& pn, bool fold, bool with_hints) {
  const bool from_values = fold && pn.spec->host_eval == HostEval::kFromValues;
  const std::vector<std::string> all_inputs = pn.node.AllInputs();
  std::vector<std::optional<mx::array>> inputs;
  std::vector<const Tensor*> host(all_inputs.size(), nullptr);
  for (size_t k = 0; k < all_inputs.size(); ++k) {
    std::shared_ptr<const Tensor> h = Host(all_inputs[k]);
    if (!h && with_hints) h = Hint(all_inputs[k]);
    host[k] = h.get();  // kept alive by host_ (here or in an enclosing trace)
    if (k < pn.node.inputs.size())
      inputs.push_back(from_values && h ? std::optional<mx::array>(ToArray(*h)) : Array(all_inputs[k]));
  }
  for (size_t k : pn.host_inputs)
    if (!host.at(k))
      throw std::logic_error("[MlxEp] " + pn.node.Label() + ": input '" + all_inputs[k] +
                             "' has no host value in partition " + plan_.name);
  std::vector<ElemType> out_types;
  for (const auto& out : pn.node.outputs) {
    auto t = plan_.value_types.find(out);
    out_types.push_back(t == plan_.value_types.end() ? ElemType::kUndefined : t->second);
  }
  OpContext ctx(pn.node, std::move(inputs), std::move(host), std::move(out_types),
                fold ? host_stream_ : stream_);
  ctx.set_checks(check_sink_);                              // a body's checks join the enclosing partition's
  if (!fold && !parent_) ctx.set_in_place(&node_updates_);  // a body's values are no partition's outputs
  if (!parent_) {  // a body's values may be read by the enclosing graph too: readers() unknown there
    std::vector<size_t> readers;
    for (const std::string& name : pn.node.inputs) {
      const auto it = readers_.find(name);
      readers.push_back(name.empty() || it == readers_.end() ? 0 : it->second);
    }
    ctx.set_readers(std::move(readers));
  }
  if (!pn.subplans.empty())
    ctx.set_subgraph_tracer([this, &pn](const std::string& attr, const std::vector<TracedValue>& in) {
      return TraceBody(pn, attr, in);
    });
  return ctx;
}

std::optional<mx::array> PlanTrace::Array(const std::string& name) const {
  if (name.empty()) return std::nullopt;
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto c = ConstantView(plan_, name, stream_)) return c;
  if (parent_) return parent_->Array(name);
  throw std::logic_error("[MlxEp] value '" + name + "' is not available in partition " + plan_.name);
}

// Keeps a node's InPlaceUpdate when the runner can act on it: the output is one partition
// output, the input a partition input only this node reads, and the shapes fit. Else the
// output is written whole, as any other.
void PlanTrace::AcceptInPlace(const PlanNode& pn, const std::vector<mx::array>& outs, InPlaceUpdate u) {
  const std::vector<std::string> ins = pn.node.AllInputs();
  if (u.output >= outs.size() || u.output >= pn.node.outputs.size() || u.input >= pn.node.inputs.size())
    return;
  const std::string &out_name = pn.node.outputs[u.output], &in_name = ins[u.input];
  const auto& outputs = plan_.output_names;
  const auto& inputs = plan_.input_names;
  auto out_it = std::find(outputs.begin(), outputs.end(), out_name);
  auto in_it = std::find(inputs.begin(), inputs.end(), in_name);
  if (out_name.empty() || out_it == outputs.end() ||
      std::count(outputs.begin(), outputs.end(), out_name) != 1 || in_it == inputs.end() ||
      readers_[in_name] != 1)  // this node's read only: no other node's, not a partition output
    return;
  const mx::array &out = outs[u.output], in = *Array(in_name);
  const int rank = static_cast<int>(out.ndim());
  if (in.shape() != out.shape() || in.dtype() != out.dtype() || u.rows.dtype() != out.dtype() ||
      static_cast<int>(u.rows.ndim()) != rank || u.axis < 1 || u.axis >= rank ||
      u.offsets.size() != static_cast<size_t>(out.shape(0)))
    return;
  for (int d = 0; d < rank; ++d)
    if (d == u.axis ? u.rows.shape(d) > out.shape(d) : u.rows.shape(d) != out.shape(d)) return;
  InPlaceOutput where;
  where.output = static_cast<size_t>(out_it - outputs.begin());
  where.input = static_cast<size_t>(in_it - inputs.begin());
  where.axis = u.axis;
  for (const auto& [w, _] : in_place_)
    if (w.output == where.output) return;
  in_place_.emplace_back(where, std::move(u));
}

// A folded node's checks hold host data: evaluate them at once.
void PlanTrace::RunChecksNow(size_t from) {
  for (size_t i = from; i < check_sink_->size(); ++i) {
    mx::eval((*check_sink_)[i].ok);
    if (!(*check_sink_)[i].ok.item<bool>()) throw std::invalid_argument((*check_sink_)[i].message);
  }
  check_sink_->erase(check_sink_->begin() + from, check_sink_->end());
}

// -1 when every check holds, else the index of the first that fails; the messages go to info_.
mx::array PlanTrace::FirstFailedCheck() {
  mx::array code(-1, mx::int32);
  for (size_t i = check_sink_->size(); i-- > 0;)
    code = mx::where((*check_sink_)[i].ok, code, mx::array(static_cast<int32_t>(i), mx::int32), stream_);
  if (info_)
    for (const auto& check : (*check_sink_)) {
      info_->check_messages.push_back(check.message);
      info_->check_is_assumption.push_back(check.assumption);
    }
  return code;
}

// The peak of live bytes when the nodes run in plan order, each value live from its node to its
// last consumer (a partition output to the end), as ORT's CPU EP would allocate them.
void PlanTrace::Count(const PlanNode& pn, const std::string& name, size_t bytes) {
  live_ = SaturatingAdd(live_, bytes);
  live_bytes_[name] = bytes;
  bytes_ = std::max(bytes_, live_);
  if (bytes >= largest_bytes_) {
    largest_bytes_ = bytes;
    largest_ = pn.node.Label() + " (" + pn.node.op_type + ")";
  }
}

// After node `index` ran: the values it was the last consumer of are dead, and its outputs that
// nobody reads.
void PlanTrace::Release(size_t index, const PlanNode& pn) {
  std::vector<std::string> done = pn.node.AllInputs();
  done.insert(done.end(), pn.node.outputs.begin(), pn.node.outputs.end());
  for (const auto& name : done) {
    auto last = last_use_.find(name);
    auto live = live_bytes_.find(name);
    if (live == live_bytes_.end() || (last != last_use_.end() && last->second != index)) continue;
    live_ -= std::min(live_, live->second);
    live_bytes_.erase(live);
  }
}

void PlanTrace::CheckOutputCount(const PlanNode& pn, const std::vector<mx::array>& outs) {
  // Trailing optional outputs may be left out only when unused.
  for (size_t k = outs.size(); k < pn.node.outputs.size(); ++k)
    if (!pn.node.outputs[k].empty())
      throw std::logic_error("[MlxEp][" + pn.node.op_type + "] " + pn.node.Label() +
                             ": translation produced no output " + std::to_string(k));
}

}  // namespace trace_internal

std::vector<mx::array> TracePlan(const Plan& plan, const std::vector<mx::array>& inputs,
                                 const std::vector<const Tensor*>& host_inputs, mx::Stream stream,
                                 TraceInfo* info, const DynamicTrace* dynamic) {
  trace_internal::PlanTrace trace(plan, stream, info, nullptr, dynamic);
  trace.BindInputs(inputs, host_inputs);
  for (const PlanNode& pn : plan.nodes) trace.Run(pn);
  return trace.Outputs();
}

}  // namespace mlx_ep
