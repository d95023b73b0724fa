#include "graph/graph.h"

#include <cstring>
#include <stdexcept>

#include "common/error.h"

namespace mlx_ep {
namespace {

template <typename Out, typename In>
void Convert(const std::vector<uint8_t>& bytes, std::vector<Out>& out) {
  const size_t n = bytes.size() / sizeof(In);
  out.resize(n);
  for (size_t k = 0; k < n; ++k) {
    In v;
    std::memcpy(&v, bytes.data() + k * sizeof(In), sizeof(In));
    out[k] = static_cast<Out>(v);
  }
}

// Half-precision bits to float, exact for all finite values, infinities and NaN.
float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

template <typename Out>
std::vector<Out> ConvertAll(const Tensor& t) {
  std::vector<Out> out;
  switch (t.type) {
    case ElemType::kFloat:
      Convert<Out, float>(t.bytes, out);
      break;
    case ElemType::kDouble:
      Convert<Out, double>(t.bytes, out);
      break;
    case ElemType::kInt8:
      Convert<Out, int8_t>(t.bytes, out);
      break;
    case ElemType::kUInt8:
      Convert<Out, uint8_t>(t.bytes, out);
      break;
    case ElemType::kBool:
      Convert<Out, uint8_t>(t.bytes, out);
      break;
    case ElemType::kInt16:
      Convert<Out, int16_t>(t.bytes, out);
      break;
    case ElemType::kUInt16:
      Convert<Out, uint16_t>(t.bytes, out);
      break;
    case ElemType::kInt32:
      Convert<Out, int32_t>(t.bytes, out);
      break;
    case ElemType::kUInt32:
      Convert<Out, uint32_t>(t.bytes, out);
      break;
    case ElemType::kInt64:
      Convert<Out, int64_t>(t.bytes, out);
      break;
    case ElemType::kUInt64:
      Convert<Out, uint64_t>(t.bytes, out);
      break;
    case ElemType::kFloat16: {
      std::vector<uint16_t> h;
      Convert<uint16_t, uint16_t>(t.bytes, h);
      for (uint16_t v : h) out.push_back(static_cast<Out>(HalfToFloat(v)));
      break;
    }
    case ElemType::kBFloat16: {
      std::vector<uint16_t> h;
      Convert<uint16_t, uint16_t>(t.bytes, h);
      for (uint16_t v : h) {
        uint32_t bits = static_cast<uint32_t>(v) << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out.push_back(static_cast<Out>(f));
      }
      break;
    }
    default:
      throw NotImplementedError("[MlxEp] cannot read a " + ElemName(t.type) + " tensor on the host");
  }
  return out;
}

}  // namespace

int64_t Tensor::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> Tensor::ToInt64() const { return ConvertAll<int64_t>(*this); }
std::vector<double> Tensor::ToDouble() const { return ConvertAll<double>(*this); }

const Attribute* Node::Attr(const std::string& attr_name) const {
  auto it = attributes.find(attr_name);
  return it == attributes.end() ? nullptr : &it->second;
}

int64_t Node::AttrInt(const std::string& attr_name, int64_t fallback) const {
  const Attribute* a = Attr(attr_name);
  return a && a->kind == Attribute::Kind::kInt ? a->i : fallback;
}

float Node::AttrFloat(const std::string& attr_name, float fallback) const {
  const Attribute* a = Attr(attr_name);
  return a && a->kind == Attribute::Kind::kFloat ? a->f : fallback;
}

std::string Node::AttrString(const std::string& attr_name, const std::string& fallback) const {
  const Attribute* a = Attr(attr_name);
  return a && a->kind == Attribute::Kind::kString ? a->s : fallback;
}

std::optional<std::vector<int64_t>> Node::AttrInts(const std::string& attr_name) const {
  const Attribute* a = Attr(attr_name);
  if (!a) return std::nullopt;
  if (a->kind == Attribute::Kind::kInts) return a->ints;
  if (a->kind == Attribute::Kind::kInt) return std::vector<int64_t>{a->i};
  return std::nullopt;
}

std::vector<std::string> Node::AllInputs() const {
  std::vector<std::string> all = inputs;
  all.insert(all.end(), implicit_inputs.begin(), implicit_inputs.end());
  return all;
}

const Graph* Node::Subgraph(const std::string& attr) const {
  auto it = subgraphs.find(attr);
  return it == subgraphs.end() ? nullptr : it->second.get();
}

std::string Node::QualifiedOp() const { return (domain.empty() ? "ai.onnx" : domain) + "::" + op_type; }

std::string Node::Label() const { return name.empty() ? op_type + "#" + std::to_string(index) : name; }

const ValueInfo* Graph::Value(const std::string& value_name) const {
  if (value_name.empty()) return nullptr;
  auto it = values.find(value_name);
  return it == values.end() ? nullptr : &it->second;
}

int Graph::Producer(const std::string& value) const {
  auto it = producer_.find(value);
  return it == producer_.end() ? -1 : it->second;
}

std::unordered_map<std::string, int> Graph::ReaderCounts(const std::vector<std::string>& also_outputs) const {
  std::unordered_map<std::string, int> readers;
  for (const Node& n : nodes)
    for (const std::string& in : n.AllInputs()) ++readers[in];
  for (const std::string& out : outputs) ++readers[out];
  for (const std::string& out : also_outputs) ++readers[out];
  return readers;
}

void Graph::IndexProducers() {
  producer_.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    nodes[i].index = i;
    for (const auto& out : nodes[i].outputs)
      if (!out.empty()) producer_[out] = static_cast<int>(i);
  }
}

}  // namespace mlx_ep
