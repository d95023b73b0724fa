// PartitionRunner: dynamic dims (docs/dynamic_shapes.md): which input dims vary, and the one
// compiled function that serves every size of them.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "runtime/memory.h"
#include "runtime/mlx_thread.h"
#include "runtime/runner.h"
#include "runtime/runner_internal.h"

namespace mlx_ep {

std::vector<std::pair<size_t, size_t>> PartitionRunner::DynamicDims(const std::vector<InputTensor>& inputs) {
  WorkerCache& w = caches_.at(CurrentMlxWorker());
  if (w.first_shapes.empty()) {
    for (const InputTensor& t : inputs) {
      w.first_shapes.push_back(t.shape);
      w.varying.emplace_back(t.shape.size(), false);
    }
    return {};
  }
  std::vector<std::pair<size_t, size_t>> dims;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int64_t>& shape = inputs[i].shape;
    if (shape.size() != w.first_shapes[i].size() || plan_.input_is_host[i]) continue;
    for (size_t a = 0; a < shape.size(); ++a) {
      if (shape[a] != w.first_shapes[i][a]) w.varying[i][a] = true;
      if (w.varying[i][a] && !w.static_dims.count({i, a})) dims.emplace_back(i, a);
    }
  }
  return dims;
}

PartitionRunner::CacheEntry PartitionRunner::MakeDynamicEntry(
    const std::vector<std::pair<size_t, size_t>>& dims, const std::vector<InputTensor>& inputs,
    const std::vector<mx::array>& arrays) {
  auto d = std::make_shared<DynamicEntry>();
  d->dims = dims;
  for (const mx::array& a : arrays) {
    d->axes.emplace_back(a.ndim(), -1);
    d->trace_shapes.push_back(a.shape());
    d->dtypes.push_back(a.dtype());
  }
  for (size_t s = 0; s < dims.size(); ++s) d->axes[dims[s].first][dims[s].second] = static_cast<int>(s);
  d->device = RuntimeDevice();
  d->prologue = FindPrologue(plan_, d->axes, arrays, mx::default_stream(d->device));
  auto host = HostValues(inputs);
  const std::vector<const Tensor*> host_ptrs = HostPointers(host);
  auto messages = std::make_shared<std::vector<std::string>>();
  auto assumptions = std::make_shared<std::vector<bool>>();
  auto updates = std::make_shared<std::vector<InPlaceOutput>>();
  // fn's inputs: the static inputs, the dynamic ones' shapes (int64 [rank]), the prologue's
  // values. The dynamic inputs themselves are placeholders of their shape when traced.
  auto unpack = [d](const std::vector<mx::array>& in, std::vector<mx::array>& full, DynamicTrace& t) {
    t = DynamicTrace{&d->axes, &d->prologue, {}, {}};
    size_t next = 0;
    for (size_t i = 0; i < d->axes.size(); ++i)
      full.push_back(d->IsDynamic(i) ? mx::zeros(d->trace_shapes[i], d->dtypes[i]) : in.at(next++));
    for (size_t i = 0; i < d->axes.size(); ++i)
      t.runtime_shapes.push_back(d->IsDynamic(i) ? std::optional<mx::array>(in.at(next++)) : std::nullopt);
    while (next < in.size()) t.boundary.push_back(in[next++]);
  };
  if (d->device != mx::Device(mx::Device::cpu)) {
    // As ChooseDevice: a graph holding an empty value must not run on a GPU. The main graph's
    // shapes are the same for every run of the key, so one trace tells.
    std::vector<mx::array> full;
    DynamicTrace t;
    unpack(DynamicInputs(*d, arrays), full, t);
    TraceInfo info;
    TracePlan(plan_, full, host_ptrs, mx::default_stream(d->device), &info, &t);
    if (info.saw_empty) throw DynamicShapeUnsupported("[MlxEp] an empty value with dynamic dims on a GPU");
  }
  auto scalars = std::make_shared<ScalarInputs>();
  auto traced = [this, host_ptrs, d, messages, assumptions, updates, unpack,
                 scalars](const std::vector<mx::array>& in) {
    std::vector<mx::array> full;
    DynamicTrace t;
    unpack(in, full, t);
    return Trace(full, host_ptrs, d->device, messages.get(), assumptions.get(), &t, updates.get(), nullptr,
                 scalars.get());
  };
  CacheEntry entry{mx::compile(traced), std::move(host), {}, messages, assumptions, d, updates, {}};
  entry.traced = traced;
  entry.scalars = scalars;
  return entry;
}

std::vector<mx::array> PartitionRunner::CallDynamic(CacheEntry& entry, const std::vector<mx::array>& arrays) {
  return Call(entry, DynamicInputs(*entry.dynamic, arrays));
}

std::vector<mx::array> PartitionRunner::DynamicInputs(const DynamicEntry& d,
                                                      const std::vector<mx::array>& arrays) {
  std::vector<mx::array> in;
  for (size_t i = 0; i < arrays.size(); ++i)
    if (!d.IsDynamic(i)) in.push_back(arrays[i]);
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (!d.IsDynamic(i)) continue;
    const std::vector<int64_t> dims(arrays[i].shape().begin(), arrays[i].shape().end());
    in.push_back(mx::array(dims.begin(), mx::Shape{static_cast<int>(dims.size())}, mx::int64));
  }
  for (mx::array& v : RunPrologue(plan_, d.prologue, arrays, mx::default_stream(d.device))) in.push_back(v);
  return in;
}

std::optional<std::vector<mx::array>> PartitionRunner::EvaluateDynamic(const std::vector<InputTensor>& inputs,
                                                                       const std::vector<mx::array>& arrays,
                                                                       Evaluated& used) {
  for (;;) {
    const std::vector<std::pair<size_t, size_t>> dims = DynamicDims(inputs);
    if (dims.empty()) return std::nullopt;
    // Empty tensors run on MLX's CPU device (ChooseDevice): leave them to the per-shape path.
    for (const auto& [input, axis] : dims)
      if (ByteSize(inputs[input]) == 0) return std::nullopt;
    const SignatureKey key = MakeKey(inputs, &dims);
    try {
      CacheEntry* entry = Find(key, false);
      const bool hit = entry != nullptr;
      std::vector<mx::array> outputs;
      if (hit) {
        outputs = CallDynamic(*entry, arrays);
      } else {
        // Traced before it joins the cache, so that a failed attempt evicts nothing.
        const auto start = std::chrono::steady_clock::now();
        CacheEntry made = MakeDynamicEntry(dims, inputs, arrays);
        outputs = CallDynamic(made, arrays);
        CountTraceTime(start);
        entry = &Insert(key, std::move(made));
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++(hit ? stats_.cache_hits : stats_.cache_misses);
      }
      used = Evaluated{};
      used.check_messages = entry->check_messages;
      used.check_is_assumption = entry->check_is_assumption;
      used.dynamic_key = key;
      used.in_place = entry->in_place;
      return outputs;
    } catch (const DynamicShapeUnsupported& e) {
      // Exact for no value of these dims: they are static from now on.
      Erase(key);
      if (e.symbols.empty()) caches_.at(CurrentMlxWorker()).static_dims.insert(dims.begin(), dims.end());
      for (int s : e.symbols) caches_.at(CurrentMlxWorker()).static_dims.insert(dims.at(s));
    }
  }
}

}  // namespace mlx_ep
