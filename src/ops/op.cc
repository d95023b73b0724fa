#include "ops/op.h"

#include <stdexcept>

#include "common/env.h"
#include "common/error.h"

namespace mlx_ep {

const ValueInfo* NodeView::input_info(size_t i) const {
  return has_input(i) ? graph_.Value(node_.inputs[i]) : nullptr;
}

ElemType NodeView::input_type(size_t i) const {
  const ValueInfo* v = input_info(i);
  return v ? v->type : ElemType::kUndefined;
}

ElemType NodeView::output_type(size_t i) const {
  const ValueInfo* v = has_output(i) ? graph_.Value(node_.outputs[i]) : nullptr;
  return v ? v->type : ElemType::kUndefined;
}

std::optional<std::vector<int64_t>> NodeView::input_shape(size_t i) const {
  const ValueInfo* v = input_info(i);
  return v ? v->shape : std::nullopt;
}

std::optional<int64_t> NodeView::input_rank(size_t i) const {
  auto s = input_shape(i);
  if (!s) return std::nullopt;
  return static_cast<int64_t>(s->size());
}

const Tensor* NodeView::constant_input(size_t i) const {
  const ValueInfo* v = input_info(i);
  return v && v->is_constant_initializer ? v->constant.get() : nullptr;
}

bool NodeView::is_constant_input(size_t i) const {
  const ValueInfo* v = input_info(i);
  return v && v->is_constant_initializer;
}

const SubgraphFacts* NodeView::subgraph(const std::string& attr) const {
  if (!subgraphs_) return nullptr;
  auto it = subgraphs_->find(attr);
  return it == subgraphs_->end() ? nullptr : &it->second;
}

std::vector<TracedValue> OpContext::TraceSubgraph(const std::string& attr,
                                                  const std::vector<TracedValue>& inputs) const {
  if (!tracer_) Fail("cannot trace subgraph '" + attr + "' here");
  return tracer_(attr, inputs);
}

void OpContext::SetHostOutput(size_t k, std::shared_ptr<const Tensor> value) const {
  if (host_outputs_.size() <= k) host_outputs_.resize(k + 1);
  host_outputs_[k] = std::move(value);
}

const mx::array& OpContext::input(size_t i) const {
  if (!has_input(i)) Fail("input " + std::to_string(i) + " is absent");
  return *inputs_[i];
}

int64_t HostScalar(const OpContext& c, const Tensor& t, const std::string& what) {
  if (t.NumElements() != 1) c.Fail(what + " must hold exactly one value");
  return t.ToInt64().at(0);
}

std::optional<double> OpContext::known_scalar(size_t i) const {
  const Tensor* t = host_if_known(i);
  if (!t || t->NumElements() != 1) return std::nullopt;
  return t->ToDouble()[0];
}

const Tensor& OpContext::host(size_t i) const {
  if (i >= host_.size() || host_[i] == nullptr)
    Fail("input " + std::to_string(i) + " has no host value (the claim must list it in host_inputs)");
  return *host_[i];
}

mx::Dtype OpContext::output_dtype(size_t i) const {
  auto d = ToMlxDtype(output_type(i));
  if (!d)
    throw NotImplementedError("[MlxEp][" + node.op_type + "] " + node.Label() + ": output " +
                              std::to_string(i) + " has type " + ElemName(output_type(i)) +
                              " which MLX lacks");
  return *d;
}

void OpContext::Fail(const std::string& message) const {
  throw InvalidArgumentError("[MlxEp][" + node.op_type + "] " + node.Label() + ": " + message);
}

void OpContext::Require(const mx::array& ok, const std::string& message) const {
  const std::string full = "[MlxEp][" + node.op_type + "] " + node.Label() + ": " + message;
  if (!checks_) throw std::logic_error(full + " (no place to record the runtime check)");
  checks_->push_back({mx::all(ok, stream), full});
}

void OpContext::UpdateInPlace(size_t output, size_t input, int axis, mx::array rows,
                              mx::array offsets) const {
  if (in_place_) in_place_->push_back({output, input, axis, std::move(rows), std::move(offsets)});
}

mx::array ToArray(const Tensor& t) {
  auto dtype = ToMlxDtype(t.type);
  if (!dtype) throw NotImplementedError("[MlxEp] no MLX dtype for " + ElemName(t.type));
  mx::Shape shape(t.shape.begin(), t.shape.end());
  auto* copy = new uint8_t[t.bytes.size() ? t.bytes.size() : 1];
  std::copy(t.bytes.begin(), t.bytes.end(), copy);
  return mx::array(copy, shape, *dtype, [](void* p) { delete[] static_cast<uint8_t*>(p); });
}

mx::array ShareArray(std::shared_ptr<const Tensor> t) {
  auto dtype = ToMlxDtype(t->type);
  if (!dtype) throw NotImplementedError("[MlxEp] no MLX dtype for " + ElemName(t->type));
  if (t->bytes.empty()) return ToArray(*t);  // no bytes to share (MLX wants a valid pointer)
  mx::Shape shape(t->shape.begin(), t->shape.end());
  void* data = const_cast<uint8_t*>(t->bytes.data());  // MLX never writes an array it does not own
  // Without a copy where WrapHostMemory can (MLX's CPU-only allocator); mx::array(void*, ...)
  // copies there, and the weights would be held twice.
  if (std::optional<mx::array> a = WrapHostMemory(data, shape, *dtype, t)) return *a;
  auto* owner = new std::shared_ptr<const Tensor>(std::move(t));
  return mx::array(data, shape, *dtype, [owner](void*) { delete owner; });
}

std::optional<mx::Dtype> ToMlxDtype(ElemType t) {
  switch (t) {
    case ElemType::kBool:
      return mx::bool_;
    case ElemType::kUInt8:
      return mx::uint8;
    case ElemType::kUInt16:
      return mx::uint16;
    case ElemType::kUInt32:
      return mx::uint32;
    case ElemType::kUInt64:
      return mx::uint64;
    case ElemType::kInt8:
      return mx::int8;
    case ElemType::kInt16:
      return mx::int16;
    case ElemType::kInt32:
      return mx::int32;
    case ElemType::kInt64:
      return mx::int64;
    case ElemType::kFloat16:
      return mx::float16;
    case ElemType::kBFloat16:
      return mx::bfloat16;
    case ElemType::kFloat:
      return mx::float32;
    case ElemType::kDouble:
      return mx::float64;
    case ElemType::kComplex64:
      return mx::complex64;
    default:
      return std::nullopt;
  }
}

ElemType FromMlxDtype(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_:
      return ElemType::kBool;
    case mx::Dtype::Val::uint8:
      return ElemType::kUInt8;
    case mx::Dtype::Val::uint16:
      return ElemType::kUInt16;
    case mx::Dtype::Val::uint32:
      return ElemType::kUInt32;
    case mx::Dtype::Val::uint64:
      return ElemType::kUInt64;
    case mx::Dtype::Val::int8:
      return ElemType::kInt8;
    case mx::Dtype::Val::int16:
      return ElemType::kInt16;
    case mx::Dtype::Val::int32:
      return ElemType::kInt32;
    case mx::Dtype::Val::int64:
      return ElemType::kInt64;
    case mx::Dtype::Val::float16:
      return ElemType::kFloat16;
    case mx::Dtype::Val::bfloat16:
      return ElemType::kBFloat16;
    case mx::Dtype::Val::float32:
      return ElemType::kFloat;
    case mx::Dtype::Val::float64:
      return ElemType::kDouble;
    case mx::Dtype::Val::complex64:
      return ElemType::kComplex64;
  }
  return ElemType::kUndefined;
}

bool DeviceSupports(ElemType t) {
  if (!ToMlxDtype(t) || t == ElemType::kComplex64) return false;
  if (t == ElemType::kDouble) return RuntimeDevice() == mx::Device(mx::Device::cpu);
  return true;
}

}  // namespace mlx_ep
