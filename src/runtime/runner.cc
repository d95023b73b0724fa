#include "runtime/runner.h"

#include <cstring>
#include <sstream>

#include "runtime/mlx_thread.h"

namespace mlx_ep {
namespace {

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

PartitionRunner::PartitionRunner(Plan plan, bool compile, size_t max_compiled)
    : plan_(std::move(plan)), compile_(compile), max_compiled_(max_compiled) {}

PartitionRunner::~PartitionRunner() {
  try {
    // Compiled functions erase themselves from the MLX thread's compile cache: do it there.
    RunOnMlxThread([this] {
      cache_.clear();
      lru_.clear();
      plan_.constants.clear();
    });
  } catch (...) {
    // Nothing sensible to do while a session is being torn down.
  }
}

mx::Device PartitionRunner::ChooseDevice(const std::vector<mx::array>& inputs,
                                         const std::vector<const Tensor*>& host) const {
  const mx::Device device = RuntimeDevice();
  if (device == mx::Device(mx::Device::cpu)) return device;
  TraceInfo info;
  TracePlan(plan_, inputs, host, mx::default_stream(device), &info);
  return info.saw_empty ? mx::Device(mx::Device::cpu) : device;
}

std::vector<mx::array> PartitionRunner::Trace(const std::vector<mx::array>& inputs,
                                              const std::vector<const Tensor*>& host, mx::Device device,
                                              std::vector<std::string>* check_messages) {
  TraceInfo info;
  std::vector<mx::array> outputs = TracePlan(plan_, inputs, host, mx::default_stream(device), &info);
  if (check_messages) *check_messages = std::move(info.check_messages);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.traces;
  stats_.folded_nodes += info.folded;
  return outputs;
}

PartitionRunner::CacheEntry& PartitionRunner::Lookup(const std::string& key,
                                                     const std::function<CacheEntry()>& make) {
  auto it = cache_.find(key);
  const bool hit = it != cache_.end();
  if (hit) {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    it = cache_.emplace(key, make()).first;
    lru_.push_front(key);
    it->second.lru = lru_.begin();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++(hit ? stats_.cache_hits : stats_.cache_misses);
  // Shapes that keep changing (a growing sequence, say) must not grow memory without bound.
  while (max_compiled_ > 0 && cache_.size() > max_compiled_) {
    cache_.erase(lru_.back());  // never the entry just used: it is at the front
    lru_.pop_back();
    ++stats_.evictions;
  }
  return it->second;
}

RunnerStats PartitionRunner::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void PartitionRunner::Run(const std::vector<InputTensor>& inputs, const OutputSink& sink) {
  if (inputs.size() != plan_.input_names.size())
    throw std::invalid_argument("[MlxEp] partition " + plan_.name + " expects " +
                                std::to_string(plan_.input_names.size()) + " inputs, got " +
                                std::to_string(inputs.size()));
  RunOnMlxThread([&] { Execute(inputs, sink); });
}

std::vector<Tensor> PartitionRunner::Run(const std::vector<InputTensor>& inputs) {
  std::vector<Tensor> outputs(plan_.output_names.size());
  Run(inputs, [&](size_t k, const std::vector<int64_t>& shape, size_t bytes) -> void* {
    outputs.at(k) = Tensor{plan_.output_types.at(k), shape, std::vector<uint8_t>(bytes)};
    return outputs[k].bytes.data();
  });
  return outputs;
}

void PartitionRunner::Execute(const std::vector<InputTensor>& inputs, const OutputSink& sink) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.runs;
  }

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
  std::shared_ptr<std::vector<std::string>> check_messages;
  if (!compile_) {
    check_messages = std::make_shared<std::vector<std::string>>();
    outputs = Trace(arrays, host_ptrs, ChooseDevice(arrays, host_ptrs), check_messages.get());
  } else {
    CacheEntry& entry = Lookup(key.str(), [&] {
      const mx::Device device = ChooseDevice(arrays, host_ptrs);
      auto messages = std::make_shared<std::vector<std::string>>();
      auto traced = [this, host_ptrs, device, messages](const std::vector<mx::array>& in) {
        return Trace(in, host_ptrs, device, messages.get());
      };
      return CacheEntry{mx::compile(traced), host, {}, messages};
    });
    outputs = entry.fn(arrays);
    check_messages = entry.check_messages;
  }
  mx::eval(outputs);
  // The runtime checks' verdict (TracePlan) is the output after the partition's outputs.
  if (outputs.size() > plan_.output_names.size()) {
    const int32_t failed = outputs.back().item<int32_t>();
    if (failed >= 0)
      throw std::invalid_argument(static_cast<size_t>(failed) < check_messages->size()
                                      ? check_messages->at(failed)
                                      : "[MlxEp] a runtime check of partition " + plan_.name + " failed");
  }
  // Copy out while `arrays` still holds the inputs: MLX never donated an input buffer to an
  // output, and an output that aliases an input (Identity) still points at live memory.
  for (size_t k = 0; k < plan_.output_names.size(); ++k) {
    const mx::array& a = outputs[k];
    void* dst = sink(k, std::vector<int64_t>(a.shape().begin(), a.shape().end()), a.nbytes());
    if (a.nbytes()) std::memcpy(dst, a.data<uint8_t>(), a.nbytes());
  }
}

}  // namespace mlx_ep
