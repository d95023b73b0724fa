#include "runtime/runner.h"

#include <algorithm>
#include <cstring>

#include "runtime/memory.h"
#include "runtime/mlx_thread.h"

namespace mlx_ep {
namespace {

size_t ByteSize(const InputTensor& t) {
  size_t n = ElemSize(t.type);
  for (int64_t d : t.shape) n *= static_cast<size_t>(d);
  return n;
}

// Binds one input as an MLX array, without a copy where MLX can read ORT's memory: on the CPU
// device ORT's host memory, on a GPU the MLX memory the EP lent ORT (runtime/memory.h). The
// caller keeps the array referenced during evaluation, so MLX never donates the buffer to an
// output. Other memory is copied (GPU kernels cannot read arbitrary host memory); `copied`
// counts those bytes.
mx::array BindInput(const InputTensor& t, uint64_t& copied, uint64_t& wrapped) {
  auto dtype = ToMlxDtype(t.type);
  if (!dtype) throw std::invalid_argument("[MlxEp] input type " + ElemName(t.type) + " has no MLX dtype");
  mx::Shape shape(t.shape.begin(), t.shape.end());
  if (DeviceMemoryEnabled()) {
    if (std::optional<mx::array> a = WrapDeviceMemory(t.data, shape, *dtype)) {
      wrapped += ByteSize(t);
      return *a;
    }
    if (t.device_memory && ByteSize(t))
      throw std::invalid_argument("[MlxEp] an input is in device memory that the EP did not allocate");
  }
  if (RuntimeDevice() == mx::Device(mx::Device::cpu) && t.data) {
    wrapped += ByteSize(t);
    return mx::array(const_cast<void*>(t.data), shape, *dtype, [](void*) {});
  }
  Tensor copy{t.type, t.shape, {}};
  const auto* p = static_cast<const uint8_t*>(t.data);
  copy.bytes.assign(p, p + ByteSize(t));
  copied += ByteSize(t);
  return ToArray(copy);
}

// Appends a host input's bytes to a signature key: their count, then 8 bytes per word.
void AppendBytes(const uint8_t* bytes, size_t size, std::vector<int64_t>& key) {
  key.push_back(static_cast<int64_t>(size));
  for (size_t i = 0; i < size; i += 8) {
    int64_t word = 0;
    std::memcpy(&word, bytes + i, std::min<size_t>(8, size - i));
    key.push_back(word);
  }
}

}  // namespace

PartitionRunner::PartitionRunner(Plan plan, bool compile, size_t max_compiled)
    : plan_(std::move(plan)),
      compile_(compile),
      max_compiled_(max_compiled),
      alias_seen_(plan_.output_names.size(), false) {}

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
                                              std::vector<std::string>* check_messages,
                                              std::vector<InPlaceOutput>* in_place) {
  TraceInfo info;
  std::vector<mx::array> outputs = TracePlan(plan_, inputs, host, mx::default_stream(device), &info);
  if (check_messages) *check_messages = std::move(info.check_messages);
  if (in_place) *in_place = std::move(info.in_place);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.traces;
  stats_.folded_nodes += info.folded;
  return outputs;
}

size_t PartitionRunner::SignatureHash::operator()(const SignatureKey& key) const noexcept {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

PartitionRunner::CacheEntry* PartitionRunner::Find(const SignatureKey& key) {
  auto it = cache_.find(key);
  const bool hit = it != cache_.end();
  if (hit) lru_.splice(lru_.begin(), lru_, it->second.lru);
  std::lock_guard<std::mutex> lock(mu_);
  ++(hit ? stats_.cache_hits : stats_.cache_misses);
  return hit ? &it->second : nullptr;
}

PartitionRunner::CacheEntry& PartitionRunner::Insert(const SignatureKey& key, CacheEntry entry) {
  auto it = cache_.emplace(key, std::move(entry)).first;
  lru_.push_front(key);
  it->second.lru = lru_.begin();
  // Shapes that keep changing (a growing sequence, say) must not grow memory without bound.
  std::lock_guard<std::mutex> lock(mu_);
  while (max_compiled_ > 0 && cache_.size() > max_compiled_) {
    cache_.erase(lru_.back());  // never the entry just added: it is at the front
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

PartitionRunner::SignatureKey PartitionRunner::MakeKey(const std::vector<InputTensor>& inputs) const {
  SignatureKey key;
  key.reserve(inputs.size() * 4);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputTensor& t = inputs[i];
    key.push_back(static_cast<int64_t>(t.type));
    key.push_back(static_cast<int64_t>(t.shape.size()));
    key.insert(key.end(), t.shape.begin(), t.shape.end());
    if (plan_.input_is_host[i]) AppendBytes(static_cast<const uint8_t*>(t.data), ByteSize(t), key);
  }
  return key;
}

std::vector<std::shared_ptr<const Tensor>> PartitionRunner::HostValues(
    const std::vector<InputTensor>& inputs) const {
  std::vector<std::shared_ptr<const Tensor>> host(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!plan_.input_is_host[i]) continue;
    const InputTensor& t = inputs[i];
    const auto* p = static_cast<const uint8_t*>(t.data);
    host[i] = std::make_shared<Tensor>(Tensor{t.type, t.shape, std::vector<uint8_t>(p, p + ByteSize(t))});
  }
  return host;
}

std::vector<mx::array> PartitionRunner::Evaluate(const std::vector<InputTensor>& inputs,
                                                 const std::vector<mx::array>& arrays,
                                                 std::shared_ptr<std::vector<std::string>>& check_messages,
                                                 std::shared_ptr<std::vector<InPlaceOutput>>& in_place) {
  auto pointers = [](const std::vector<std::shared_ptr<const Tensor>>& host) {
    std::vector<const Tensor*> ptrs(host.size(), nullptr);
    for (size_t i = 0; i < host.size(); ++i) ptrs[i] = host[i].get();
    return ptrs;
  };
  if (!compile_) {
    const auto host = HostValues(inputs);
    const auto host_ptrs = pointers(host);
    check_messages = std::make_shared<std::vector<std::string>>();
    in_place = std::make_shared<std::vector<InPlaceOutput>>();
    return Trace(arrays, host_ptrs, ChooseDevice(arrays, host_ptrs), check_messages.get(), in_place.get());
  }
  // On a hit nothing is copied: the key holds the host inputs' bytes, the entry their values.
  const SignatureKey key = MakeKey(inputs);
  CacheEntry* entry = Find(key);
  if (!entry) {
    auto host = HostValues(inputs);
    const auto host_ptrs = pointers(host);
    const mx::Device device = ChooseDevice(arrays, host_ptrs);
    auto messages = std::make_shared<std::vector<std::string>>();
    auto updates = std::make_shared<std::vector<InPlaceOutput>>();
    auto traced = [this, host_ptrs, device, messages, updates](const std::vector<mx::array>& in) {
      return Trace(in, host_ptrs, device, messages.get(), updates.get());
    };
    entry = &Insert(key, CacheEntry{mx::compile(traced), std::move(host), {}, messages, updates});
  }
  check_messages = entry->check_messages;
  in_place = entry->in_place;
  std::vector<mx::array> outputs = entry->fn(arrays);  // traces on the first call: fills both
  return outputs;
}

void PartitionRunner::WriteOutputs(const std::vector<mx::array>& outputs, const OutputSink& sink,
                                   const std::vector<bool>& skip) {
  uint64_t copied = 0, adopted = 0;
  for (size_t k = 0; k < plan_.output_names.size(); ++k) {  // not the runtime checks' verdict
    if (k < skip.size() && skip[k]) continue;
    const mx::array& a = outputs[k];
    const std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    if (DeviceMemoryEnabled() && Adoptable(a)) {
      // ORT allocates the output from the EP's allocator: it gets MLX's buffer itself.
      AdoptScope scope(a);
      void* dst = sink(k, shape, a.nbytes());
      if (scope.Adopted(dst)) {
        adopted += a.nbytes();
        continue;
      }
      std::memcpy(dst, a.data<uint8_t>(), a.nbytes());  // a buffer ORT had (IOBinding, say)
      copied += a.nbytes();
      continue;
    }
    void* dst = sink(k, shape, a.nbytes());
    if (a.nbytes()) std::memcpy(dst, a.data<uint8_t>(), a.nbytes());
    copied += a.nbytes();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out_host_copied += copied;
  stats_.bytes_out_adopted += adopted;
}

void PartitionRunner::Execute(const std::vector<InputTensor>& inputs, const OutputSink& sink) {
  std::vector<mx::array> arrays;
  arrays.reserve(inputs.size());
  uint64_t copied = 0, wrapped = 0;
  for (const InputTensor& t : inputs) arrays.push_back(BindInput(t, copied, wrapped));
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.runs;
    stats_.bytes_in_host_copied += copied;
    stats_.bytes_in_wrapped += wrapped;
  }
  std::shared_ptr<std::vector<std::string>> check_messages;
  std::shared_ptr<std::vector<InPlaceOutput>> in_place;
  std::vector<mx::array> outputs = Evaluate(inputs, arrays, check_messages, in_place);
  // An output whose buffer is its input's own (a shared KV cache) is never evaluated: only its
  // new rows are (TracePlan's outputs after the partition's and the checks' verdict).
  std::vector<void*> given(plan_.output_names.size(), nullptr);
  std::vector<bool> aliased(plan_.output_names.size(), false);
  ProbeInPlace(inputs, outputs, *in_place, sink, given, aliased);
  EvalExceptAliased(outputs, *in_place, aliased, !check_messages->empty());
  // The runtime checks' verdict (TracePlan) is the output after the partition's outputs.
  if (!check_messages->empty()) {
    const int32_t failed = outputs.at(plan_.output_names.size()).item<int32_t>();
    if (failed >= 0)
      throw std::invalid_argument(static_cast<size_t>(failed) < check_messages->size()
                                      ? check_messages->at(failed)
                                      : "[MlxEp] a runtime check of partition " + plan_.name + " failed");
  }
  // Copy out while `arrays` still holds the inputs: MLX never donated an input buffer to an
  // output, and an output that aliases an input (Identity) still points at live memory.
  if (!WriteInPlace(outputs, *in_place, given, aliased)) {
    // An offset out of range (a total length past the buffer, whose outputs are NaN): nothing
    // was written; every output whole, from a second evaluation (only on such inputs).
    outputs = Evaluate(inputs, arrays, check_messages, in_place);
    mx::eval(outputs);
    aliased.assign(aliased.size(), false);
  }
  // The buffers ProbeInPlace was given already; noting those ORT gives later that are aliased.
  auto give = [&](size_t k, const std::vector<int64_t>& shape, size_t bytes) -> void* {
    if (given[k]) return given[k];
    void* dst = sink(k, shape, bytes);
    for (const InPlaceOutput& e : *in_place)
      if (e.output == k && dst && dst == inputs[e.input].data) alias_seen_[k] = true;
    return dst;
  };
  WriteOutputs(outputs, give, aliased);
}

void PartitionRunner::EvalExceptAliased(const std::vector<mx::array>& outputs,
                                        const std::vector<InPlaceOutput>& in_place,
                                        const std::vector<bool>& aliased, bool has_checks) {
  const size_t n = plan_.output_names.size();
  std::vector<mx::array> needed;
  for (size_t k = 0; k < n; ++k)
    if (!aliased[k]) needed.push_back(outputs[k]);
  if (has_checks) needed.push_back(outputs.at(n));
  for (const InPlaceOutput& e : in_place)
    if (aliased[e.output]) needed.insert(needed.end(), {outputs[e.rows], outputs[e.offsets]});
  mx::eval(needed);  // `needed` dies here: a second reference would keep outputs from being adopted
}

void PartitionRunner::ProbeInPlace(const std::vector<InputTensor>& inputs,
                                   const std::vector<mx::array>& outputs,
                                   const std::vector<InPlaceOutput>& in_place, const OutputSink& sink,
                                   std::vector<void*>& given, std::vector<bool>& aliased) {
  for (const InPlaceOutput& e : in_place) {
    const mx::array& a = outputs[e.output];
    const InputTensor& t = inputs[e.input];
    const std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    if (shape != t.shape || a.nbytes() != ByteSize(t) || a.nbytes() == 0 || !t.data || given[e.output])
      continue;
    // ORT's buffer for an output it did not bind is allocated here; with device memory that
    // would forgo adopting MLX's own buffer, so it is asked for early only once seen aliased.
    if (DeviceMemoryEnabled() && !alias_seen_[e.output]) continue;
    given[e.output] = sink(e.output, shape, a.nbytes());  // the sink checks ORT's size
    aliased[e.output] = given[e.output] == t.data;
    if (aliased[e.output]) alias_seen_[e.output] = true;
  }
}

bool PartitionRunner::WriteInPlace(const std::vector<mx::array>& outputs,
                                   const std::vector<InPlaceOutput>& in_place,
                                   const std::vector<void*>& given, const std::vector<bool>& aliased) {
  for (const InPlaceOutput& e : in_place) {
    if (!aliased[e.output]) continue;
    const mx::array& offsets = outputs[e.offsets];
    const int64_t room = outputs[e.output].shape(e.axis) - outputs[e.rows].shape(e.axis);
    const int32_t* off = offsets.data<int32_t>();
    if (!std::all_of(off, off + offsets.size(), [&](int32_t o) { return o >= 0 && o <= room; })) return false;
  }
  uint64_t in_place_bytes = 0;
  for (const InPlaceOutput& e : in_place) {
    if (!aliased[e.output]) continue;
    const mx::array &rows = outputs[e.rows], &offsets = outputs[e.offsets];
    const mx::Shape& shape = outputs[e.output].shape();
    size_t outer = 1, per_entry = 1, inner = rows.itemsize();  // rows are row-contiguous
    for (int d = 0; d < e.axis; ++d) outer *= static_cast<size_t>(shape[d]);
    for (int d = 1; d < e.axis; ++d) per_entry *= static_cast<size_t>(shape[d]);
    for (size_t d = e.axis + 1; d < shape.size(); ++d) inner *= static_cast<size_t>(shape[d]);
    const size_t len = static_cast<size_t>(shape[e.axis]), seq = static_cast<size_t>(rows.shape(e.axis));
    auto* dst = static_cast<uint8_t*>(given[e.output]);
    const uint8_t* src = rows.data<uint8_t>();
    const int32_t* off = offsets.data<int32_t>();
    for (size_t o = 0; o < outer; ++o)
      std::memcpy(dst + (o * len + static_cast<size_t>(off[o / per_entry])) * inner, src + o * seq * inner,
                  seq * inner);
    in_place_bytes += rows.nbytes();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out_in_place += in_place_bytes;
  return true;
}

}  // namespace mlx_ep
