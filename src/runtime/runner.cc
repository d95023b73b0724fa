#include "runtime/runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "common/env.h"
#include "common/error.h"
#include "common/log.h"
#include "runtime/census.h"
#include "runtime/device.h"
#include "runtime/device_writes.h"
#include "runtime/memory.h"
#include "runtime/mlx_thread.h"
#include "runtime/precision.h"
#include "runtime/reshape_chains.h"
#include "runtime/runner_internal.h"
#include "runtime/scalars.h"

namespace mlx_ep {
namespace {

// Traces on this thread, so that a run can tell whether it traced (RunnerStats' phases count
// runs that did not: a trace's run also pays MLX's JIT compiles).
thread_local uint64_t traces_on_this_thread = 0;

/** The ids of the arrays `plan` holds (its initializers): the constant folder folds what reads
 *  them however small (the views and concatenations translations make of weights). */
std::unordered_set<std::uintptr_t> HeldIds(const Plan& plan) {
  std::unordered_set<std::uintptr_t> ids;
  for (const auto& [name, array] : plan.constants) ids.insert(array.id());
  return ids;
}

uint64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  return static_cast<uint64_t>(us.count());
}

// Binds one input as an MLX array, without a copy where MLX can read ORT's memory: on the CPU
// device ORT's host memory, on a GPU the MLX memory the EP lent ORT (runtime/memory.h). MLX
// donates only buffers it owns, so it never writes into ORT's; the caller keeps the array
// referenced during evaluation. Other memory is copied (GPU kernels cannot read arbitrary host memory);
// `copied` counts those bytes.
mx::array BindInput(const InputTensor& t, uint64_t& copied, uint64_t& wrapped) {
  auto dtype = ToMlxDtype(t.type);
  if (!dtype) throw NotImplementedError("[MlxEp] input type " + ElemName(t.type) + " has no MLX dtype");
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
    // MLX's own constructor wraps without a copy where its allocator can (Metal, page-aligned
    // memory) and copies elsewhere; the bytes count as wrapped only when the array reads `data`.
    std::optional<mx::array> a = WrapHostMemory(t.data, shape, *dtype);
    if (!a) a = mx::array(const_cast<void*>(t.data), shape, *dtype, [](void*) {});
    (a->data<void>() == t.data ? wrapped : copied) += ByteSize(t);
    return *a;
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
      caches_(MlxWorkerCount()),
      alias_seen_(new std::atomic<bool>[plan_.output_names.size()]()),
      folder_(HeldIds(plan_)) {}

PartitionRunner::~PartitionRunner() {
  // A compiled function erases its entries from the compile cache of the thread that made it;
  // release each on its worker, so that nothing of it outlives the runner there.
  for (size_t k = 0; k < caches_.size(); ++k) {
    if (caches_[k].entries.empty()) continue;
    try {
      RunOnMlxWorker(k, [&cache = caches_[k]] {
        cache.entries.clear();
        cache.lru.clear();
      });
    } catch (...) {
      // Nothing sensible to do while a session is being torn down.
    }
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
                                              std::vector<bool>* check_is_assumption,
                                              const DynamicTrace* dynamic,
                                              std::vector<InPlaceOutput>* in_place, RowTracker* rows,
                                              ScalarInputs* scalars) {
  TraceInfo info;
  info.rows = rows;
  std::vector<mx::array> outputs = TracePlan(plan_, inputs, host, mx::default_stream(device), &info, dynamic);
  // Constants first: a folded scalar is then a leaf that ScalarLeavesAsData hides too.
  const size_t constant_primitives = EnvFlag(env::kNoConstantFold) ? 0 : folder_.Fold(outputs, inputs);
  CollapseReshapeChains(outputs);
  ScalarLeavesAsData(outputs, mx::default_stream(device), scalars);  // one kernel for every prompt length
  if (check_messages) *check_messages = std::move(info.check_messages);
  if (check_is_assumption) *check_is_assumption = std::move(info.check_is_assumption);
  if (in_place) *in_place = std::move(info.in_place);
  ++traces_on_this_thread;
  std::lock_guard<std::mutex> lock(mu_);
  if (scalars && scalars->inputs) {  // Call's second trace of a signature counted already
    ++stats_.scalar_input_traces;
    return outputs;
  }
  ++stats_.traces;
  stats_.folded_nodes += info.folded;
  stats_.constant_primitives_folded += constant_primitives;
  return outputs;
}

void PartitionRunner::CountTraceTime(std::chrono::steady_clock::time_point start) {
  const uint64_t us = MicrosSince(start);
  std::lock_guard<std::mutex> lock(mu_);
  stats_.trace_us += us;
}

size_t PartitionRunner::SignatureHash::operator()(const SignatureKey& key) const noexcept {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
  for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
  return static_cast<size_t>(h);
}

PartitionRunner::CacheEntry* PartitionRunner::Find(const SignatureKey& key, bool count) {
  WorkerCache& cache = caches_.at(CurrentMlxWorker());
  auto it = cache.entries.find(key);
  const bool hit = it != cache.entries.end();
  if (hit) cache.lru.splice(cache.lru.begin(), cache.lru, it->second.lru);
  if (count) {
    std::lock_guard<std::mutex> lock(mu_);
    ++(hit ? stats_.cache_hits : stats_.cache_misses);
  }
  return hit ? &it->second : nullptr;
}

void PartitionRunner::Erase(const SignatureKey& key) {
  WorkerCache& cache = caches_.at(CurrentMlxWorker());
  auto it = cache.entries.find(key);
  if (it == cache.entries.end()) return;
  cache.lru.erase(it->second.lru);
  cache.entries.erase(it);
}

PartitionRunner::CacheEntry& PartitionRunner::Insert(const SignatureKey& key, CacheEntry entry) {
  WorkerCache& cache = caches_.at(CurrentMlxWorker());
  auto it = cache.entries.emplace(key, std::move(entry)).first;
  cache.lru.push_front(key);
  it->second.lru = cache.lru.begin();
  // Shapes that keep changing (a growing sequence, say) must not grow memory without bound.
  std::lock_guard<std::mutex> lock(mu_);
  while (max_compiled_ > 0 && cache.entries.size() > max_compiled_) {
    cache.entries.erase(cache.lru.back());  // never the entry just added: it is at the front
    cache.lru.pop_back();
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
  NoteMlxStarted();  // the first trace may multiply float32 matrices: MLX reads its TF32 switch then
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

PartitionRunner::SignatureKey PartitionRunner::MakeKey(
    const std::vector<InputTensor>& inputs, const std::vector<std::pair<size_t, size_t>>* dynamic) const {
  // A dynamic dim's size is left out as a value no size has: keys with and without dynamic
  // dims never meet.
  constexpr int64_t kDynamicDim = std::numeric_limits<int64_t>::min();
  SignatureKey key;
  key.reserve(inputs.size() * 4);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputTensor& t = inputs[i];
    key.push_back(static_cast<int64_t>(t.type));
    key.push_back(static_cast<int64_t>(t.shape.size()));
    const size_t at = key.size();
    key.insert(key.end(), t.shape.begin(), t.shape.end());
    if (dynamic)
      for (const auto& [input, axis] : *dynamic)
        if (input == i) key[at + axis] = kDynamicDim;
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
                                                 const std::vector<mx::array>& arrays, Evaluated& used) {
  std::shared_ptr<std::vector<std::string>>& check_messages = used.check_messages;
  std::shared_ptr<std::vector<InPlaceOutput>>& in_place = used.in_place;
  if (!compile_) {
    const auto host = HostValues(inputs);
    const auto host_ptrs = HostPointers(host);
    check_messages = std::make_shared<std::vector<std::string>>();
    in_place = std::make_shared<std::vector<InPlaceOutput>>();
    return Trace(arrays, host_ptrs, ChooseDevice(arrays, host_ptrs), check_messages.get(), nullptr, nullptr,
                 in_place.get());
  }
  if (auto outputs = EvaluateDynamic(inputs, arrays, used)) return *outputs;
  // On a hit nothing is copied: the key holds the host inputs' bytes, the entry their values.
  const SignatureKey key = MakeKey(inputs);
  CacheEntry* entry = Find(key);
  if (!entry) {
    auto host = HostValues(inputs);
    const auto host_ptrs = HostPointers(host);
    const mx::Device device = ChooseDevice(arrays, host_ptrs);
    auto messages = std::make_shared<std::vector<std::string>>();
    auto updates = std::make_shared<std::vector<InPlaceOutput>>();
    auto scalars = std::make_shared<ScalarInputs>();
    auto traced = [this, host_ptrs, device, messages, updates, scalars](const std::vector<mx::array>& in) {
      return Trace(in, host_ptrs, device, messages.get(), nullptr, nullptr, updates.get(), nullptr,
                   scalars.get());
    };
    entry = &Insert(key, CacheEntry{mx::compile(traced), std::move(host), {}, messages, {}, {}, updates, {}});
    entry->traced = traced;
    entry->scalars = scalars;
    const auto start = std::chrono::steady_clock::now();
    std::vector<mx::array> outputs = Call(*entry, arrays);  // traces on the first call: fills both
    CountTraceTime(start);
    check_messages = entry->check_messages;
    in_place = entry->in_place;
    return outputs;
  }
  check_messages = entry->check_messages;
  in_place = entry->in_place;
  return Call(*entry, arrays);
}

std::vector<mx::array> PartitionRunner::Call(CacheEntry& entry, const std::vector<mx::array>& inputs) {
  auto with_scalars = [&entry](std::vector<mx::array> all) {
    all.insert(all.end(), entry.scalars->values.begin(), entry.scalars->values.end());
    return all;
  };
  if (entry.with_scalars) return entry.with_scalars(with_scalars(inputs));
  // The first call traces fn, which finds the leaves (none before it): a function called once
  // never pays a second trace. A failed second compile clears `traced`, so it is not tried again.
  static const bool off = EnvOff(env::kScalarInputs);
  if (off || !entry.traced || !entry.scalars || entry.scalars->values.empty()) return entry.fn(inputs);
  const size_t n = inputs.size();
  MlxFunction compiled =
      mx::compile([traced = entry.traced, scalars = entry.scalars, n](const std::vector<mx::array>& all) {
        const std::vector<mx::array> head(all.begin(), all.begin() + n), tail(all.begin() + n, all.end());
        struct Reset {  // the trace's inputs end with it, also when it throws
          ScalarInputs* s;
          ~Reset() { s->inputs = nullptr; }
        } reset{scalars.get()};
        scalars->inputs = &tail;
        return traced(head);
      });
  const auto start = std::chrono::steady_clock::now();
  try {
    std::vector<mx::array> outputs = compiled(with_scalars(inputs));
    CountTraceTime(start);
    entry.with_scalars = std::move(compiled);
    entry.fn = nullptr;  // on this worker, so its compile cache entry goes with it
    return outputs;
  } catch (const std::exception&) {
    // Traced once already, so not expected; fn serves on as it did.
    CountTraceTime(start);
    entry.traced = nullptr;
    return entry.fn(inputs);
  }
}

void PartitionRunner::WriteOutputs(const std::vector<mx::array>& outputs, const OutputSink& sink,
                                   const std::vector<bool>& skip, std::vector<mx::array>* writes) {
  uint64_t copied = 0, adopted = 0, device_copied = 0;
  for (size_t k = 0; k < plan_.output_names.size(); ++k) {  // not the runtime checks' verdict
    if (k < skip.size() && skip[k]) continue;
    const mx::array& a = outputs[k];
    const std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
    // With device writes a kernel copies the output into ORT's buffer: adopting MLX's buffer
    // instead would move it out of the CUDA memory pool (data(): a new managed allocation and a
    // synchronous copy), which costs more than the copy.
    const char* refusal = DeviceMemoryEnabled() && !writes ? AdoptRefusal(a) : "";
    const bool verbose = EnvFlag(env::kVerbose);
    if (refusal && *refusal && (verbose || OrtWouldLog(LogSeverity::kVerbose, logger_)) &&
        !logged_refusal_.exchange(true))
      LogLine("partition " + plan_.name + ": output " + std::to_string(k) +
                  " is copied, not handed to ORT: " + refusal,
              LogSeverity::kVerbose, logger_, verbose);
    if (!refusal) {
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
    (WriteOutput(a, dst, writes) ? device_copied : copied) += a.nbytes();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out_host_copied += copied;
  stats_.bytes_out_adopted += adopted;
  stats_.bytes_out_device_copied += device_copied;
}

bool PartitionRunner::WriteOutput(const mx::array& a, void* dst, std::vector<mx::array>* writes) {
  if (!a.nbytes()) return false;
  if (writes) {
    std::optional<mx::array> target = WrapDeviceMemory(dst, a.shape(), a.dtype());
    if (target && target->flags().row_contiguous) {
      writes->push_back(WriteInto(*target, a, mx::default_stream(RuntimeDevice())));
      return true;
    }
  }
  mx::eval({a});  // AsyncRunEvaluation only started it
  std::memcpy(dst, a.data<uint8_t>(), a.nbytes());
  return false;
}

std::vector<mx::array> PartitionRunner::EvaluateChecked(const std::vector<InputTensor>& inputs,
                                                        const std::vector<mx::array>& arrays,
                                                        const OutputSink& sink, Evaluated& used,
                                                        std::vector<void*>& given,
                                                        std::vector<bool>& aliased) {
  const size_t n = plan_.output_names.size();
  if (min_bucket_ > 0 && compile_)
    if (std::optional<Bucket> b = ChooseBucket(inputs))
      if (auto outputs = EvaluateBucketed(*b, inputs, arrays, sink, used, given, aliased)) return *outputs;
  for (;;) {
    used = Evaluated{};
    const auto start = std::chrono::steady_clock::now();
    std::vector<mx::array> outputs = Evaluate(inputs, arrays, used);
    used.graph_us = MicrosSince(start);
    // The runtime checks' verdict (TracePlan: the output after the partition's outputs) first:
    // a failed assumption of a dynamic function retraces before ORT is asked for any output
    // buffer (ORT fixes an output's shape when it gives the buffer).
    if (used.check_messages && !used.check_messages->empty()) {
      mx::eval(outputs.at(n));
      const int32_t failed = outputs.at(n).item<int32_t>();
      const auto& assumptions = used.check_is_assumption;
      if (failed >= 0 && used.dynamic_key && assumptions &&
          static_cast<size_t>(failed) < assumptions->size() && (*assumptions)[failed]) {
        // A function with dynamic dims that does not hold for these inputs (nothing was written
        // yet): its dims are static from now on, and the run is traced for its shapes.
        if (CacheEntry* entry = Find(*used.dynamic_key, false))
          caches_.at(CurrentMlxWorker())
              .static_dims.insert(entry->dynamic->dims.begin(), entry->dynamic->dims.end());
        Erase(*used.dynamic_key);
        continue;
      }
      if (failed >= 0) {
        const auto& messages = used.check_messages;
        throw std::invalid_argument(static_cast<size_t>(failed) < messages->size()
                                        ? messages->at(failed)
                                        : "[MlxEp] a runtime check of partition " + plan_.name + " failed");
      }
    }
    // An output whose buffer is its input's own (a shared KV cache) is never evaluated: only its
    // new rows are (TracePlan's outputs after the partition's and the checks' verdict).
    given.assign(n, nullptr);
    aliased.assign(n, false);
    ProbeInPlace(inputs, outputs, *used.in_place, sink, given, aliased);
    used.offsets_ok = EvalExceptAliased(outputs, *used.in_place, aliased, /*has_checks=*/false, used.pending);
    return outputs;
  }
}

void PartitionRunner::LogCensus(const std::vector<mx::array>& outputs) {
  const uint64_t call = census_calls_.fetch_add(1, std::memory_order_relaxed);
  if (call >= 8 && call % 32 != 0) return;
  const std::string census = FormatCensus(PrimitiveCensus(outputs));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (census == last_census_) return;
    last_census_ = census;
  }
  LogLine("partition " + plan_.name + ": MLX primitives per run, " + census, LogSeverity::kInfo, logger_);
  if (EnvString(env::kGraphCensus) == "graph")
    LogLine("partition " + plan_.name + ": MLX graph of a run\n" + PrintedGraph(outputs), LogSeverity::kInfo,
            logger_);
}

void PartitionRunner::Execute(const std::vector<InputTensor>& inputs, const OutputSink& sink) {
  const auto bind_start = std::chrono::steady_clock::now();
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
  const size_t n = plan_.output_names.size();
  Evaluated used;
  std::vector<void*> given(n, nullptr);
  std::vector<bool> aliased(n, false);
  const uint64_t traces_before = traces_on_this_thread;
  const auto start = std::chrono::steady_clock::now();
  const uint64_t bind_us = MicrosSince(bind_start);
  std::vector<mx::array> outputs = EvaluateChecked(inputs, arrays, sink, used, given, aliased);
  const uint64_t evaluated_us = MicrosSince(start);
  const auto written = std::chrono::steady_clock::now();
  // Copy out while `arrays` still holds the inputs: MLX never donated an input buffer to an
  // output, and an output that aliases an input (Identity) still points at live memory.
  std::vector<mx::array> writes;  // device writes: kernels evaluated once, after the outputs
  // An offset out of range (an op's in-place rows past the buffer): nothing was written; every
  // output whole, from a second evaluation (only on such inputs).
  auto whole = [&] {
    outputs = Evaluate(inputs, arrays, used);
    mx::eval(outputs);
    aliased.assign(aliased.size(), false);
  };
  bool verdict_pending = false;
  uint64_t device_rows_bytes = 0;
  if (!WriteInPlace(outputs, *used.in_place, given, aliased, used.offsets_ok, writes, verdict_pending,
                    device_rows_bytes))
    whole();
  // The buffers ProbeInPlace was given already; noting those ORT gives later that are aliased.
  auto give = [&](size_t k, const std::vector<int64_t>& shape, size_t bytes) -> void* {
    if (given[k]) return given[k];
    void* dst = sink(k, shape, bytes);
    for (const InPlaceOutput& e : *used.in_place)
      if (e.output == k && dst && dst == inputs[e.input].data) alias_seen_[k] = true;
    return dst;
  };
  std::vector<mx::array>* device_writes = DeviceWritesEnabled() ? &writes : nullptr;
  if (!device_writes) {
    // The host reads the outputs (adopts or copies them): the asynchronous evaluation done, and
    // its references gone, which would keep MLX's buffers from being adopted.
    mx::eval(used.pending);
    used.pending.clear();
  }
  WriteOutputs(outputs, give, aliased, device_writes);
  // Evaluated before ORT sees any output: the kernels have written when this returns; so has
  // the asynchronous evaluation (its arrays, waited for: MLX ran it first on the same stream).
  const auto waited = std::chrono::steady_clock::now();
  if (!writes.empty()) mx::eval(writes);
  mx::eval(used.pending);
  const uint64_t wait_us = MicrosSince(waited);
  if (verdict_pending) {
    if (used.offsets_ok->item<int32_t>() == 0) {  // the row kernels wrote nothing
      whole();
      writes.clear();
      WriteOutputs(outputs, give, aliased, device_writes);
      if (!writes.empty()) mx::eval(writes);
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_out_in_place += device_rows_bytes;
    }
  }
  const uint64_t write_us = MicrosSince(written);
  if (traces_on_this_thread != traces_before) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.steady_runs;
  stats_.bind_us += bind_us;
  stats_.graph_us += used.graph_us;
  stats_.eval_us += evaluated_us - std::min(evaluated_us, used.graph_us);
  stats_.write_us += write_us;
  stats_.wait_us += wait_us;
}

}  // namespace mlx_ep
