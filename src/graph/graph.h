// An owned copy of (part of) an ORT graph: nodes, value infos, attributes and the
// constant initializers we need. Everything above the ABI layer reads this, never OrtGraph,
// so claim, partition, plan and translation can be tested without ORT.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/elem_type.h"

namespace mlx_ep {

struct Graph;

/** A host tensor with owned bytes (row-major). */
struct Tensor {
  ElemType type = ElemType::kUndefined;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  /** Number of elements (1 for a scalar). */
  int64_t NumElements() const;
  /** The elements converted to int64 (integer, bool and floating types). */
  std::vector<int64_t> ToInt64() const;
  /** The elements converted to double (exact for every floating type). */
  std::vector<double> ToDouble() const;
};

/** One node attribute. Graph-valued attributes are recorded by kind only. */
struct Attribute {
  enum class Kind { kUndefined, kInt, kInts, kFloat, kFloats, kString, kStrings, kTensor, kGraph };
  Kind kind = Kind::kUndefined;
  int64_t i = 0;
  float f = 0.f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strings;
  std::shared_ptr<const Tensor> tensor;
};

/** Type, shape and (for constant initializers) data of one graph value. */
struct ValueInfo {
  std::string name;
  bool is_tensor = true;
  ElemType type = ElemType::kUndefined;
  /** Dims, -1 where symbolic or unknown; nullopt when even the rank is unknown. */
  std::optional<std::vector<int64_t>> shape;
  bool is_constant_initializer = false;
  /** A subgraph's reference to a value of an enclosing graph (resolved there when tracing). */
  bool is_outer_scope = false;
  /** Data of a constant initializer, when it was copied (small ones always; all of them at Compile). */
  std::shared_ptr<const Tensor> constant;
};

/** One node. Missing optional inputs/outputs are empty names. */
struct Node {
  size_t index = 0;  ///< position in Graph::nodes
  std::string name;
  std::string op_type;
  std::string domain;  ///< "" for ai.onnx
  int since_version = 0;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attributes;
  bool has_subgraphs = false;
  /** Values of enclosing scopes that the subgraphs read (If/Loop/Scan bodies): inputs of the node
   *  for ordering, partitioning and the fused node's inputs, though not in `inputs`. */
  std::vector<std::string> implicit_inputs;
  /** The graph-valued attributes (then_branch, else_branch, body), by attribute name. */
  std::map<std::string, std::shared_ptr<const Graph>> subgraphs;

  /** `inputs` followed by `implicit_inputs`: every value the node depends on. A claim's
   *  host_inputs index this list (an index past `inputs` names an implicit input). */
  std::vector<std::string> AllInputs() const;
  /** The subgraph of attribute `attr`, or nullptr. */
  const Graph* Subgraph(const std::string& attr) const;

  /** The attribute, or nullptr. */
  const Attribute* Attr(const std::string& name) const;
  /** Integer attribute or `fallback`. */
  int64_t AttrInt(const std::string& name, int64_t fallback) const;
  /** Float attribute or `fallback`. */
  float AttrFloat(const std::string& name, float fallback) const;
  /** String attribute or `fallback`. */
  std::string AttrString(const std::string& name, const std::string& fallback) const;
  /** Integer-list attribute, or nullopt when absent. */
  std::optional<std::vector<int64_t>> AttrInts(const std::string& name) const;
  /** "domain::op_type" for messages, with "ai.onnx" for the default domain. */
  std::string QualifiedOp() const;
  /** A label for messages: name if set, else "op_type#index". */
  std::string Label() const;
};

/** A graph snapshot. `nodes` are in topological order. A subgraph (a body of If/Loop/Scan)
 *  records the outer-scope values its nodes read as values with is_outer_scope set. */
struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::unordered_map<std::string, ValueInfo> values;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;

  /** Value info by name, or nullptr (also for "", the absent optional value). */
  const ValueInfo* Value(const std::string& name) const;
  /** Index of the node producing `value` in `nodes`, or -1 for graph inputs and initializers. */
  int Producer(const std::string& value) const;
  /** Rebuilds the producer index; call after filling `nodes`. */
  void IndexProducers();
  /** How many readers each value has: node inputs (implicit ones too), graph outputs, and
   *  `also_outputs` (say, a partition's outputs), each counted once a place. */
  std::unordered_map<std::string, int> ReaderCounts(const std::vector<std::string>& also_outputs = {}) const;

 private:
  std::unordered_map<std::string, int> producer_;
};

}  // namespace mlx_ep
