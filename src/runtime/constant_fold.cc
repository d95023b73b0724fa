// ConstantFolder (constant_fold.h).
#include "runtime/constant_fold.h"

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "mlx/transforms.h"

namespace mlx_ep {
namespace {

// What is worth folding reads an initializer: constants the trace made (scalars, shape vectors,
// aranges) follow the input shapes, so their folds would be one per trace and rarely reused.
constexpr size_t kMinLeafBytes = 4096;

size_t Combine(size_t seed, size_t v) {
  return seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

// Leaves up to this size are known by value: a translation makes its scalars anew in every trace
// (MatMulNBits' default zero point 8.0f, say), the plan's initializers are the same arrays in all.
constexpr size_t kByValueBytes = 64;

bool ByValue(const mx::array& leaf) { return leaf.nbytes() <= kByValueBytes && leaf.data<void>() != nullptr; }

std::string_view Bytes(const mx::array& leaf) {
  return {static_cast<const char*>(leaf.data<void>()), leaf.nbytes()};
}

bool SameLeaf(const mx::array& a, const mx::array& b) {
  if (a.id() == b.id()) return true;
  return ByValue(a) && ByValue(b) && a.dtype() == b.dtype() && a.shape() == b.shape() && Bytes(a) == Bytes(b);
}

/** A leaf of the graph still to evaluate: no primitive, or evaluated already. */
bool IsLeaf(const mx::array& a) { return !a.has_primitive() || a.is_available(); }

/** Whether each array behind the outputs depends on constants alone, by array id. */
class ConstantMap {
 public:
  explicit ConstantMap(const std::vector<mx::array>& inputs) {
    for (const mx::array& a : inputs) inputs_.insert(a.id());
  }
  bool IsConstant(const mx::array& a) {
    if (auto it = known_.find(a.id()); it != known_.end()) return it->second;
    // Iterative post order: graphs have thousands of nodes, chains hundreds deep.
    std::vector<std::pair<mx::array, bool>> stack{{a, false}};
    while (!stack.empty()) {
      auto [x, expanded] = stack.back();
      stack.pop_back();
      if (known_.count(x.id())) continue;
      if (IsLeaf(x)) {
        known_[x.id()] = !x.is_tracer() && !inputs_.count(x.id()) && x.is_available();
        continue;
      }
      if (!expanded) {
        stack.emplace_back(x, true);
        for (const mx::array& in : x.inputs())
          if (!known_.count(in.id())) stack.emplace_back(in, false);
        continue;
      }
      bool constant = !x.is_tracer() && x.siblings().empty() && !inputs_.count(x.id());
      for (const mx::array& in : x.inputs()) constant = constant && known_.at(in.id());
      known_[x.id()] = constant;
    }
    return known_.at(a.id());
  }

 private:
  std::unordered_set<std::uintptr_t> inputs_;
  std::unordered_map<std::uintptr_t, bool> known_;
};

/** The record of the constant subgraph behind `root`, its hash, and the bytes of its leaves. */
FoldRecord Describe(const mx::array& root, size_t& hash, size_t& leaf_bytes) {
  FoldRecord r;
  std::unordered_map<std::uintptr_t, int64_t> node_of, leaf_of;
  std::vector<std::pair<mx::array, bool>> stack{{root, false}};
  hash = 0;
  leaf_bytes = 0;
  while (!stack.empty()) {
    auto [x, expanded] = stack.back();
    stack.pop_back();
    if (node_of.count(x.id()) || leaf_of.count(x.id())) continue;
    if (IsLeaf(x)) {
      leaf_of[x.id()] = static_cast<int64_t>(r.leaves.size());
      r.leaves.push_back(x);
      leaf_bytes += x.nbytes();
      hash = Combine(hash, ByValue(x) ? std::hash<std::string_view>{}(Bytes(x)) : x.id());
      continue;
    }
    if (!expanded) {
      stack.emplace_back(x, true);
      for (const mx::array& in : x.inputs()) stack.emplace_back(in, false);
      continue;
    }
    FoldRecord::Node n{x.primitive_ptr(), x.shape(), x.dtype(), {}};
    for (const mx::array& in : x.inputs())
      n.inputs.push_back(node_of.count(in.id()) ? node_of.at(in.id()) : -1 - leaf_of.at(in.id()));
    hash = Combine(hash, std::hash<std::string>{}(n.primitive->name()));
    for (int d : n.shape) hash = Combine(hash, static_cast<size_t>(d));
    node_of[x.id()] = static_cast<int64_t>(r.nodes.size());
    r.nodes.push_back(std::move(n));
  }
  return r;
}

}  // namespace

bool FoldRecord::operator==(const FoldRecord& other) const {
  if (nodes.size() != other.nodes.size() || leaves.size() != other.leaves.size()) return false;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (!SameLeaf(leaves[i], other.leaves[i])) return false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node &a = nodes[i], &b = other.nodes[i];
    // Same name, then MLX's own test (mx::compile's common-subexpression pass uses it too).
    if (a.shape != b.shape || a.dtype != b.dtype || a.inputs != b.inputs) return false;
    // The device, not the stream: a value one MLX worker evaluated serves every worker's graphs
    // (evaluated arrays are what workers may share), so the workers hold one copy, not one each.
    if (a.primitive->name() != b.primitive->name() || a.primitive->device() != b.primitive->device() ||
        !a.primitive->is_equivalent(*b.primitive))
      return false;
  }
  return true;
}

size_t ConstantFolder::Fold(std::vector<mx::array>& outputs, const std::vector<mx::array>& inputs) {
  ConstantMap constants(inputs);
  // The frontier: constant arrays with a primitive that a non-constant array reads, or outputs;
  // with every place that refers to each (to swap in an earlier trace's value).
  std::unordered_map<std::uintptr_t, std::vector<mx::array*>> uses;
  std::unordered_map<std::uintptr_t, mx::array> replaced;  // by id: the earlier trace's value for it
  std::vector<mx::array> frontier;
  auto note = [&](mx::array& slot) {
    // One-element values stay: folded, each would be a leaf ScalarLeavesAsData hides behind
    // a Contiguous, more primitives than the fused kernels that compute them now.
    if (IsLeaf(slot) || !constants.IsConstant(slot)) return false;
    // A one-element constant is left as it is, not walked into.
    if (slot.size() <= 1) return true;
    // Met again below a Broadcast after an earlier trace's value replaced it.
    if (auto r = replaced.find(slot.id()); r != replaced.end()) {
      slot = r->second;
      return true;
    }
    auto [it, fresh] = uses.try_emplace(slot.id());
    if (fresh) frontier.push_back(slot);
    it->second.push_back(&slot);
    return true;
  };
  std::unordered_set<std::uintptr_t> seen;
  std::vector<mx::array> stack;
  for (mx::array& out : outputs)
    if (!note(out)) stack.push_back(out);
  while (!stack.empty()) {
    mx::array a = std::move(stack.back());
    stack.pop_back();
    if (IsLeaf(a) || !seen.insert(a.id()).second) continue;
    for (mx::array& in : a.inputs())
      if (!note(in)) stack.push_back(in);
  }
  size_t count = 0;
  std::vector<mx::array> to_eval;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t call = ++calls_;
  // By index: a broadcast too large to hold adds what it reads to the frontier.
  for (size_t i = 0; i < frontier.size(); ++i) {
    mx::array f = frontier[i];
    size_t hash = 0, leaf_bytes = 0;
    FoldRecord record = Describe(f, hash, leaf_bytes);
    const size_t primitives = record.nodes.size();
    FoldRecord* earlier = nullptr;
    for (auto [it, end] = folded_.equal_range(hash); it != end && !earlier; ++it)
      if (it->second == record) earlier = &it->second;
    const bool reads_held = std::any_of(record.leaves.begin(), record.leaves.end(),
                                        [&](const mx::array& leaf) { return held_.count(leaf.id()); });
    if (earlier) {
      earlier->last_used = call;
      for (mx::array* slot : uses.at(f.id())) *slot = *earlier->value;
      replaced.emplace(f.id(), *earlier->value);
    } else if (f.nbytes() > 2 * leaf_bytes) {
      // A weight broadcast over a product's batch: the broadcast stays (a view, one primitive a
      // run), the chain below it folds. Values that compute more bytes (a dequantized weight)
      // stay whole: their parts would be held beside the weights.
      if (std::string_view(f.primitive().name()) == "Broadcast")
        for (mx::array& in : f.inputs()) note(in);
      continue;
    } else if (leaf_bytes >= kMinLeafBytes || (reads_held && f.nbytes() <= leaf_bytes)) {
      // Under 4 KiB only views and joins of what the plan holds (a weight's reshape, its bias
      // column): a held scalar broadcast to an input's shape would be one fold per shape, and
      // would stop being a one-element leaf that compiled functions take as an input.
      record.value = f;  // evaluated below, in place: the slots already refer to it
      record.last_used = call;
      to_eval.push_back(f);
      folded_.emplace(hash, std::move(record));
    } else {
      continue;
    }
    count += primitives;
  }
  if (!to_eval.empty()) mx::eval(to_eval);
  for (auto it = folded_.begin(); it != folded_.end();)
    it = call - it->second.last_used > kKeepFor ? folded_.erase(it) : std::next(it);
  return count;
}

}  // namespace mlx_ep
