// PartitionRunner: prompt buckets (docs/dynamic_shapes.md, "Bucketing the prompt"). A first
// prompt's token axis is zero-padded to a power of two, so that prompts of many lengths share
// one compiled function per bucket; the trace of a padded signature carries the row-locality
// proof (runtime/rows.h), and the outputs are cut back to the prompt's rows, the in-place KV
// rows too (the buffer's rows after the prompt keep what they held, as without padding).
#include <algorithm>
#include <chrono>
#include <limits>

#include "common/env.h"
#include "common/log.h"
#include "runtime/device.h"
#include "runtime/mlx_thread.h"
#include "runtime/rows.h"
#include "runtime/runner.h"
#include "runtime/runner_internal.h"

namespace mlx_ep {
namespace {

int64_t BucketOf(int64_t length, int64_t min_bucket) {
  int64_t b = std::max<int64_t>(min_bucket, 1);
  while (b < length && b <= std::numeric_limits<int>::max() / 2) b *= 2;
  return std::max(b, length);
}

/** `a` with its first `rows` entries along `axis`, row-contiguous. */
mx::array FirstRows(const mx::array& a, int axis, int64_t rows, mx::Stream s) {
  mx::Shape stop = a.shape();
  stop[axis] = static_cast<int>(rows);
  return mx::contiguous(mx::slice(a, mx::Shape(a.ndim(), 0), stop, s), false, s);
}

}  // namespace

std::optional<PartitionRunner::Bucket> PartitionRunner::ChooseBucket(const std::vector<InputTensor>& inputs) {
  DynamicDims(inputs);  // notes which dims vary between runs
  const WorkerCache& w = caches_.at(CurrentMlxWorker());
  if (w.varying.size() != inputs.size()) return std::nullopt;
  Bucket b;
  b.axes.assign(inputs.size(), -1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].shape.size() != w.varying[i].size()) return std::nullopt;
    for (size_t a = 0; a < w.varying[i].size(); ++a) {
      if (!w.varying[i][a]) continue;
      const int64_t d = inputs[i].shape[a];
      if (plan_.input_is_host[i] || b.axes[i] >= 0 || (b.length && d != b.length)) return std::nullopt;
      b.length = d;
      b.axes[i] = static_cast<int>(a);
    }
  }
  if (b.length < 2) return std::nullopt;
  b.padded = BucketOf(b.length, min_bucket_);
  return b;
}

PartitionRunner::CacheEntry* PartitionRunner::BucketedEntry(const Bucket& b, const SignatureKey& key,
                                                            const std::vector<InputTensor>& padded_inputs,
                                                            const std::vector<mx::array>& padded,
                                                            std::vector<mx::array>& outputs) {
  WorkerCache& w = caches_.at(CurrentMlxWorker());
  if (CacheEntry* entry = Find(key)) {
    outputs = Call(*entry, padded);
    return entry;
  }
  auto host = HostValues(padded_inputs);
  const std::vector<const Tensor*> host_ptrs = HostPointers(host);
  auto messages = std::make_shared<std::vector<std::string>>();
  auto updates = std::make_shared<std::vector<InPlaceOutput>>();
  auto rows = std::make_shared<CacheEntry::RowAxes>();
  CacheEntry* entry = nullptr;
  const auto start = std::chrono::steady_clock::now();
  try {
    const mx::Device device = ChooseDevice(padded, host_ptrs);  // traces on GPUs
    auto scalars = std::make_shared<ScalarInputs>();
    auto traced = [this, host_ptrs, device, messages, updates, rows, scalars,
                   axes = b.axes](const std::vector<mx::array>& in) {
      RowTracker tracker(plan_, axes);
      std::vector<mx::array> outs = Trace(in, host_ptrs, device, messages.get(), nullptr, nullptr,
                                          updates.get(), &tracker, scalars.get());
      if (std::optional<std::vector<int>> cut = tracker.Finish(*updates))
        rows->axes = std::move(*cut);
      else
        rows->refusal = tracker.refusal();
      return outs;
    };
    entry =
        &Insert(key, CacheEntry{mx::compile(traced), std::move(host), {}, messages, {}, {}, updates, rows});
    entry->traced = traced;
    entry->scalars = scalars;
    outputs = Call(*entry, padded);  // traces: fills messages, updates and rows
  } catch (const std::exception& e) {
    // A translation that cannot take the padded shapes (a Reshape to a constant target, say):
    // the unpadded run traces, and reports whatever is wrong with it.
    rows->axes.clear();
    rows->refusal = std::string("its trace failed: ") + e.what();
  }
  CountTraceTime(start);
  if (entry && (!rows->axes.empty() || plan_.output_names.empty())) return entry;
  const bool verbose = EnvFlag(env::kVerbose);
  if (verbose || OrtWouldLog(LogSeverity::kVerbose, logger_))
    LogLine("partition " + plan_.name + ": a prompt of " + std::to_string(b.length) + " padded to " +
                std::to_string(b.padded) + " would not be exact, so it traces per length: " + rows->refusal,
            LogSeverity::kVerbose, logger_, verbose);
  Erase(key);
  w.unbucketable.insert(key);
  std::lock_guard<std::mutex> lock(mu_);
  if (!stats_.bucket_refusals++) stats_.bucket_refusal = rows->refusal;
  return nullptr;
}

std::optional<std::vector<mx::array>> PartitionRunner::EvaluateBucketed(
    const Bucket& b, const std::vector<InputTensor>& inputs, const std::vector<mx::array>& arrays,
    const OutputSink& sink, Evaluated& used, std::vector<void*>& given, std::vector<bool>& aliased) {
  std::vector<InputTensor> padded_inputs = inputs;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (b.axes[i] >= 0) padded_inputs[i].shape[b.axes[i]] = b.padded;
  // Keys of padded signatures never meet unpadded ones: the marker, then the padded axes.
  SignatureKey key = MakeKey(padded_inputs);
  key.push_back(std::numeric_limits<int64_t>::min() + 1);
  key.insert(key.end(), b.axes.begin(), b.axes.end());
  if (caches_.at(CurrentMlxWorker()).unbucketable.count(key)) return std::nullopt;
  std::vector<mx::array> padded = arrays;
  const mx::Stream s = mx::default_stream(RuntimeDevice());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (const int axis = b.axes[i]; axis >= 0)
      padded[i] = mx::pad(arrays[i], {axis}, {0}, {static_cast<int>(b.padded - b.length)},
                          mx::array(0, arrays[i].dtype()), "constant", s);
  std::vector<mx::array> outputs;
  CacheEntry* entry = BucketedEntry(b, key, padded_inputs, padded, outputs);
  if (!entry) return std::nullopt;
  const size_t n = plan_.output_names.size();
  if (!entry->check_messages->empty()) {  // a failed check is the unpadded run's to report
    mx::eval(outputs.at(n));
    if (outputs.at(n).item<int32_t>() >= 0) return std::nullopt;
  }
  const std::vector<InPlaceOutput>& in_place = *entry->in_place;
  // An in-place output written whole would show the padding rows: its buffer must be its input's.
  for (const InPlaceOutput& e : in_place)
    if (!alias_seen_[e.output]) return std::nullopt;
  given.assign(n, nullptr);
  aliased.assign(n, false);
  ProbeInPlace(inputs, outputs, in_place, sink, given, aliased);
  for (const InPlaceOutput& e : in_place)
    if (!aliased[e.output]) return std::nullopt;
  const std::vector<int>& axes = entry->rows->axes;
  for (size_t k = 0; k < n; ++k)
    if (axes[k] >= 0 && !aliased[k]) outputs[k] = FirstRows(outputs[k], axes[k], b.length, s);
  for (const InPlaceOutput& e : in_place) outputs[e.rows] = FirstRows(outputs[e.rows], e.axis, b.length, s);
  std::vector<mx::array> pending;
  std::optional<mx::array> offsets_ok =
      EvalExceptAliased(outputs, in_place, aliased, /*has_checks=*/false, pending);
  used = Evaluated{};
  used.check_messages = entry->check_messages;
  used.in_place = entry->in_place;
  used.offsets_ok = std::move(offsets_ok);
  used.pending = std::move(pending);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.bucketed_runs;
  return outputs;
}

}  // namespace mlx_ep
