#include "runtime/runner.h"

#include <cstring>
#include <sstream>

namespace mlx_ep {
namespace {

// MLX graph construction and evaluation are not safe to run from several threads at once.
std::mutex& MlxMutex() {
  static std::mutex m;
  return m;
}

size_t ByteSize(const InputTensor& t) {
  size_t n = ElemSize(t.type);
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  return n;
}

// Wraps ORT's memory without a copy on the CPU device (the caller keeps the array referenced
// during evaluation, so MLX never donates the buffer to an output); copies for GPU devices,
// whose kernels cannot read arbitrary host memory.
mx::array BindInput(const InputTensor& t) {
  auto dtype = ToMlxDtype(t.type);
  if (!dtype) throw std::invalid_argument("[MlxEp] input type " + ElemName(t.type) + " has no MLX dtype");
  mx::Shape shape(t.shape.begin(), t.shape.end());
  if (RuntimeDevice() == mx::Device(mx::Device::cpu) && t.data) {
    return mx::array(const_cast<void*>(t.data), shape, *dtype, [](void*) {});
  }
  Tensor copy{t.type, t.shape, {}};
  const auto* p = static_cast<const uint8_t*>(t.data);
  copy.bytes.assign(p, p + ByteSize(t));
  return ToArray(copy);
}

}  // namespace

PartitionRunner::PartitionRunner(Plan plan, bool compile) : plan_(std::move(plan)), compile_(compile) {}

mx::Stream PartitionRunner::ChooseStream(const std::vector<mx::array>& inputs,
                                         const std::vector<const Tensor*>& host) const {
  const mx::Device device = RuntimeDevice();
  if (device == mx::Device(mx::Device::cpu)) return mx::default_stream(device);
  bool saw_empty = false;
  TracePlan(plan_, inputs, host, mx::default_stream(device), &saw_empty);
  return mx::default_stream(saw_empty ? mx::Device(mx::Device::cpu) : device);
}

RunnerStats PartitionRunner::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::vector<mx::array> PartitionRunner::Run(const std::vector<InputTensor>& inputs) {
  if (inputs.size() != plan_.input_names.size())
    throw std::invalid_argument("[MlxEp] partition " + plan_.name + " expects " +
                                std::to_string(plan_.input_names.size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  std::lock_guard<std::mutex> mlx_lock(MlxMutex());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.runs;

  std::vector<mx::array> arrays;
  std::vector<std::shared_ptr<const Tensor>> host(inputs.size());
  std::ostringstream key;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputTensor& t = inputs[i];
    arrays.push_back(BindInput(t));
    key << static_cast<int>(t.type) << ':';
    for (int64_t d : t.shape) key << d << ',';
    if (plan_.input_is_host[i]) {
      auto h = std::make_shared<Tensor>(Tensor{t.type, t.shape, {}});
      const auto* p = static_cast<const uint8_t*>(t.data);
      h->bytes.assign(p, p + ByteSize(t));
      key << '=';
      for (uint8_t b : h->bytes) key << static_cast<int>(b) << '.';
      host[i] = std::move(h);
    }
    key << ';';
  }

  std::vector<const Tensor*> host_ptrs(inputs.size(), nullptr);
  for (size_t i = 0; i < host.size(); ++i) host_ptrs[i] = host[i].get();
  std::vector<mx::array> outputs;
  if (!compile_) {
    outputs = TracePlan(plan_, arrays, host_ptrs, ChooseStream(arrays, host_ptrs));
  } else {
    auto it = cache_.find(key.str());
    if (it == cache_.end()) {
      ++stats_.cache_misses;
      const mx::Stream stream = ChooseStream(arrays, host_ptrs);
      const Plan* plan = &plan_;
      auto traced = [plan, host_ptrs, stream](const std::vector<mx::array>& in) {
        return TracePlan(*plan, in, host_ptrs, stream);
      };
      it = cache_.emplace(key.str(), CacheEntry{mx::compile(traced), host}).first;
    } else {
      ++stats_.cache_hits;
    }
    outputs = it->second.fn(arrays);
  }
  mx::eval(outputs);
  return outputs;  // `arrays` stays referenced until here, so no input buffer was donated
}

}  // namespace mlx_ep
