// Constant subgraphs of a trace evaluated once, at trace time, instead of every run.
//
// Translations build MLX ops on initializers (a quantized weight's words as uint32, its scales
// as float32, biases from zero points; a weight cast or transposed): mx::compile keeps those ops
// in the compiled function, so every run evaluates them again. On a GPU every primitive costs
// host time each run (the H200's TinyLlama int4 decode step evaluated 1885 primitives, about
// seven per MatMulNBits on its constants alone); folded, they are constants of the function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "mlx/array.h"
#include "mlx/primitives.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** One folded subgraph: its nodes in post order and the constant leaves they read, to recognise
 *  an equal subgraph of a later trace (another input shape), and the value. */
struct FoldRecord {
  struct Node {
    std::shared_ptr<mx::Primitive> primitive;
    mx::Shape shape;
    mx::Dtype dtype = mx::float32;
    std::vector<int64_t> inputs;  ///< >= 0: a node; < 0: leaf -1 - index
  };
  std::vector<Node> nodes;
  std::vector<mx::array> leaves;
  std::optional<mx::array> value;
  uint64_t last_used = 0;  ///< the ConstantFolder's Fold call that last used it
  bool operator==(const FoldRecord& other) const;
};

/** The constant subgraphs of one partition's traces. Thread-safe (traces run on any MLX worker). */
class ConstantFolder {
 public:
  /** `held`: the ids of the arrays the plan holds (its initializers), see Fold. */
  explicit ConstantFolder(std::unordered_set<std::uintptr_t> held = {}) : held_(std::move(held)) {}

  /** Evaluates every array behind `outputs` that depends on constants alone (evaluated arrays
   *  that are not `inputs`, the traced function's inputs) and is read by one that does not, or
   *  is an output: in place, or as the value an equal subgraph of an earlier trace got. A value
   *  of more than twice the bytes of the constants it reads (a dequantized weight: memory, not
   *  time; a weight broadcast over the batch for a product) stays, and what it reads is folded
   *  instead. Skips values of under 4 KiB of constants (shape arithmetic, which follows the
   *  shapes) but those that read a held array and are no larger than what they read, and
   *  subgraphs with multi-output primitives.
   *  Returns the primitives folded (fresh evaluations and reuses). */
  size_t Fold(std::vector<mx::array>& outputs, const std::vector<mx::array>& inputs);

 private:
  /** Records unused for this many Fold calls are dropped (a compiled function still holding the
   *  value keeps it; only a later equal trace would fold it again). Bounds what the records keep
   *  alive when traces churn through shapes: the compile cache keeps 64 functions by default. */
  static constexpr uint64_t kKeepFor = 64;
  std::unordered_set<std::uintptr_t> held_;
  std::mutex mu_;
  uint64_t calls_ = 0;
  std::unordered_multimap<size_t, FoldRecord> folded_;
};

}  // namespace mlx_ep
