// Builds small Graph snapshots by hand for the core tests.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace mlx_ep::testing {

/** Fluent builder: values default to float tensors of unknown shape. */
class GraphBuilder {
 public:
  GraphBuilder& Input(const std::string& name, ElemType t = ElemType::kFloat,
                      std::vector<int64_t> shape = {}) {
    Declare(name, t, shape);
    g_.inputs.push_back(name);
    return *this;
  }
  /** A value of an enclosing graph that this body reads. */
  GraphBuilder& Outer(const std::string& name, ElemType t = ElemType::kFloat) {
    Declare(name, t, {});
    g_.values[name].is_outer_scope = true;
    return *this;
  }
  GraphBuilder& Constant(const std::string& name, Tensor t) {
    ValueInfo v;
    v.name = name;
    v.type = t.type;
    v.shape = t.shape;
    v.is_constant_initializer = true;
    v.constant = std::make_shared<Tensor>(std::move(t));
    g_.values[name] = v;
    return *this;
  }
  GraphBuilder& AddNode(const std::string& op, std::vector<std::string> inputs,
                        std::vector<std::string> outputs, ElemType out_type = ElemType::kFloat) {
    Node n;
    n.name = op + "_" + std::to_string(g_.nodes.size());
    n.op_type = op;
    n.since_version = 14;
    n.inputs = std::move(inputs);
    n.outputs = outputs;
    for (const auto& o : outputs) Declare(o, out_type, {});
    g_.nodes.push_back(std::move(n));
    return *this;
  }
  GraphBuilder& Output(const std::string& name) {
    g_.outputs.push_back(name);
    return *this;
  }
  Graph Build() {
    g_.IndexProducers();
    return g_;
  }

 private:
  void Declare(const std::string& name, ElemType t, const std::vector<int64_t>& shape) {
    ValueInfo v;
    v.name = name;
    v.type = t;
    if (!shape.empty()) v.shape = shape;
    g_.values[name] = v;
  }
  Graph g_;
};

/** A float32 host tensor. */
inline Tensor FloatTensor(std::vector<int64_t> shape, const std::vector<float>& values) {
  Tensor t{ElemType::kFloat, std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(float));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

/** An int64 host tensor. */
inline Tensor Int64Tensor(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  Tensor t{ElemType::kInt64, std::move(shape), {}};
  t.bytes.resize(values.size() * sizeof(int64_t));
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

}  // namespace mlx_ep::testing
