#include "abi/graph_reader.h"

#include <cstring>

namespace mlx_ep {
namespace {

std::shared_ptr<Tensor> CopyTensor(const Ort::ConstValue& value) {
  auto info = value.GetTensorTypeAndShapeInfo();
  auto t = std::make_shared<Tensor>();
  t->type = static_cast<ElemType>(info.GetElementType());
  t->shape = info.GetShape();
  if (t->type == ElemType::kString) return t;  // strings are never read by MLX
  const size_t bytes = value.GetTensorSizeInBytes();
  const auto* p = static_cast<const uint8_t*>(value.GetTensorRawData());
  if (bytes) t->bytes.assign(p, p + bytes);
  return t;
}

// ORT reports a value without shape information as rank 0, the same as a scalar, so an empty
// dims list is recorded as "rank unknown": claims then treat it conservatively.
ValueInfo ReadValueInfo(const Ort::ConstValueInfo& vi) {
  ValueInfo v;
  v.name = vi.GetName();
  auto type_info = vi.TypeInfo();
  v.is_tensor = type_info.GetONNXType() == ONNX_TYPE_TENSOR;
  if (v.is_tensor) {
    auto tensor_info = type_info.GetTensorTypeAndShapeInfo();
    v.type = static_cast<ElemType>(tensor_info.GetElementType());
    auto dims = tensor_info.GetShape();
    if (!dims.empty()) v.shape = dims;
  }
  v.is_constant_initializer = vi.IsConstantInitializer();
  v.is_outer_scope = vi.IsFromOuterScope();
  return v;
}

Attribute ReadAttribute(const Ort::ConstOpAttr& a) {
  Attribute out;
  switch (a.GetType()) {
    case ORT_OP_ATTR_INT:
      out.kind = Attribute::Kind::kInt;
      Ort::ThrowOnError(a.GetValue(out.i));
      break;
    case ORT_OP_ATTR_INTS:
      out.kind = Attribute::Kind::kInts;
      Ort::ThrowOnError(a.GetValueArray(out.ints));
      break;
    case ORT_OP_ATTR_FLOAT:
      out.kind = Attribute::Kind::kFloat;
      Ort::ThrowOnError(a.GetValue(out.f));
      break;
    case ORT_OP_ATTR_FLOATS:
      out.kind = Attribute::Kind::kFloats;
      Ort::ThrowOnError(a.GetValueArray(out.floats));
      break;
    case ORT_OP_ATTR_STRING:
      out.kind = Attribute::Kind::kString;
      Ort::ThrowOnError(a.GetValue(out.s));
      break;
    case ORT_OP_ATTR_STRINGS:
      out.kind = Attribute::Kind::kStrings;
      Ort::ThrowOnError(a.GetValueArray(out.strings));
      break;
    case ORT_OP_ATTR_TENSOR: {
      out.kind = Attribute::Kind::kTensor;
      Ort::Value value{nullptr};
      Ort::ThrowOnError(a.GetTensorAttributeAsOrtValue(value));
      out.tensor = CopyTensor(value.GetConst());
      break;
    }
    case ORT_OP_ATTR_GRAPH:
      out.kind = Attribute::Kind::kGraph;
      break;
    default:
      break;
  }
  return out;
}

void Record(Graph& g, const Ort::ConstValueInfo& vi, size_t max_constant_bytes) {
  if (vi == nullptr) return;
  std::string name = vi.GetName();
  if (name.empty() || g.values.count(name)) return;
  ValueInfo v = ReadValueInfo(vi);
  if (v.is_constant_initializer) {
    Ort::ConstValue value{nullptr};
    // Size check before the copy: weights are copied only when Compile needs them.
    if (vi.GetInitializer(value).IsOK() && value != nullptr && value.IsTensor() &&
        value.GetTensorSizeInBytes() <= max_constant_bytes)
      v.constant = CopyTensor(value);
  }
  g.values.emplace(name, std::move(v));
}

Graph ReadConstGraph(Ort::ConstGraph graph, size_t max_constant_bytes);

Node ReadNode(const Ort::ConstNode& ort_node, Graph& g, size_t max_constant_bytes) {
  Node n;
  n.name = ort_node.GetName();
  n.op_type = ort_node.GetOperatorType();
  n.domain = ort_node.GetDomain();
  if (n.domain == "ai.onnx") n.domain.clear();
  n.since_version = ort_node.GetSinceVersion();
  for (const auto& vi : ort_node.GetInputs()) {
    n.inputs.push_back(vi == nullptr ? std::string() : vi.GetName());
    Record(g, vi, max_constant_bytes);
  }
  for (const auto& vi : ort_node.GetOutputs()) {
    n.outputs.push_back(vi == nullptr ? std::string() : vi.GetName());
    Record(g, vi, max_constant_bytes);
  }
  for (const auto& attr : ort_node.GetAttributes()) n.attributes.emplace(attr.GetName(), ReadAttribute(attr));
  size_t num_subgraphs = 0;
  Ort::ThrowOnError(Ort::GetApi().Node_GetNumSubgraphs(ort_node, &num_subgraphs));
  n.has_subgraphs = num_subgraphs > 0;
  if (!n.has_subgraphs) return n;
  for (const auto& vi : ort_node.GetImplicitInputs()) {
    if (vi == nullptr) continue;
    n.implicit_inputs.push_back(vi.GetName());
    Record(g, vi, max_constant_bytes);
  }
  for (const auto& sub : ort_node.GetSubgraphs()) {
    n.subgraphs[sub.attr_name] = std::make_shared<Graph>(ReadConstGraph(sub.sub_graph, max_constant_bytes));
  }
  return n;
}

Graph ReadConstGraph(Ort::ConstGraph graph, size_t max_constant_bytes) {
  Graph g;
  g.name = graph.GetName();
  // A graph input/output with an empty name has no value info (ORT hands a null one): keep its
  // position with an empty name, as node inputs/outputs do (found by the libFuzzer target).
  for (const auto& vi : graph.GetInputs()) {
    Record(g, vi, max_constant_bytes);
    g.inputs.push_back(vi == nullptr ? std::string() : vi.GetName());
  }
  for (const auto& vi : graph.GetOutputs()) {
    Record(g, vi, max_constant_bytes);
    g.outputs.push_back(vi == nullptr ? std::string() : vi.GetName());
  }
  for (const auto& vi : graph.GetInitializers()) Record(g, vi, max_constant_bytes);
  for (const auto& ort_node : graph.GetNodes()) g.nodes.push_back(ReadNode(ort_node, g, max_constant_bytes));
  g.IndexProducers();
  return g;
}

}  // namespace

Graph ReadGraph(const OrtGraph* ort_graph, size_t max_constant_bytes) {
  return ReadConstGraph(Ort::ConstGraph{ort_graph}, max_constant_bytes);
}

Graph ReadNodeAlone(const OrtNode* node, size_t max_constant_bytes) {
  Graph g;
  g.nodes.push_back(ReadNode(Ort::ConstNode{node}, g, max_constant_bytes));
  g.IndexProducers();
  return g;
}

}  // namespace mlx_ep
