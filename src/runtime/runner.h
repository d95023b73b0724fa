// Runs one fused partition: binds ORT's input memory to MLX arrays, looks up (or traces and
// compiles) the MLX function for the input signature, evaluates it once and copies the outputs
// out. All MLX work happens on an MLX worker thread (runtime/mlx_thread.h).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/constant_fold.h"
#include "runtime/plan.h"
#include "runtime/scalars.h"

struct OrtLogger;  // ORT's C type (common/log.h)

namespace mlx_ep {
class RowTracker;  // runtime/rows.h
}

namespace mlx_ep {

/** One input as ORT hands it over: host memory valid for the duration of Run. */
struct InputTensor {
  ElemType type = ElemType::kUndefined;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  /** ORT's memory info says the tensor is in device (not host-readable) memory. */
  bool device_memory = false;
};

/** Gives the buffer for output `index` (`bytes` bytes, `shape`): ORT's output tensor. Called on
 *  the MLX thread while the caller of Run waits. May return nullptr when `bytes` is 0. */
using OutputSink = std::function<void*(size_t index, const std::vector<int64_t>& shape, size_t bytes)>;

/** Counters reported by the diagnostics. */
struct RunnerStats {
  uint64_t runs = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t traces = 0;        ///< traces of the plan into an MLX graph (one per new signature)
  uint64_t folded_nodes = 0;  ///< nodes evaluated on the host while tracing, summed over traces
  /** MLX primitives of constant subgraphs evaluated at trace time, summed over traces
   *  (runtime/constant_fold.h). */
  uint64_t constant_primitives_folded = 0;
  /** Time of the first calls of new compiled functions: the trace and mx::compile's graph passes
   *  (not the evaluation, which MLX runs later), microseconds summed over traces. */
  uint64_t trace_us = 0;
  /** Second traces of compiled functions, to take their scalar leaves as inputs (Call); not in
   *  `traces`, their time in trace_us. */
  uint64_t scalar_input_traces = 0;
  uint64_t evictions = 0;  ///< compiled functions dropped by the cache bound
  // Bytes moved per run, summed (docs/gpu_memory.md): "host copied" is a copy by the host
  // (memcpy), "wrapped" an input read in place, "adopted" an output handed over in place.
  uint64_t bytes_in_host_copied = 0;
  uint64_t bytes_in_wrapped = 0;
  uint64_t bytes_out_host_copied = 0;
  uint64_t bytes_out_adopted = 0;
  /** Outputs copied by a device kernel into ORT's buffer in EP memory (runtime/device_writes.h). */
  uint64_t bytes_out_device_copied = 0;
  /** Rows written into an output buffer that is the input it updates (a shared KV cache): the
   *  rest of that output is not copied (docs/kv_cache.md). */
  uint64_t bytes_out_in_place = 0;
  /** Runs whose token axis was padded to a bucket (ONNXRUNTIME_EP_MLX_PROMPT_BUCKETS), and padded
   *  traces the row-locality proof refused (those lengths trace per length). */
  uint64_t bucketed_runs = 0;
  uint64_t bucket_refusals = 0;
  std::string bucket_refusal;  ///< why the first refused padding was not exact
  // Where a run's time goes on the MLX worker, microseconds summed over the steady runs: those
  // that did not trace (issue 7: per-run overhead). "graph": calling the (compiled) function, which builds
  // the run's MLX graph on the host, traces included; "eval": mx::eval of it (on a GPU: encoding every
  // primitive, then waiting for the kernels); "write": the outputs and in-place rows handed to ORT.
  // "bind": the inputs made arrays, before "graph"; "wait": the part of "write" spent in the
  // evaluations that wait for the device (the writes' kernels and the run's own, when
  // asynchronous), so that "write" less "wait" is the host's own work on the outputs.
  uint64_t steady_runs = 0;
  uint64_t bind_us = 0;
  uint64_t graph_us = 0;
  uint64_t eval_us = 0;
  uint64_t write_us = 0;
  uint64_t wait_us = 0;
};

/** Compiled functions kept per partition and MLX worker by default (least recently used dropped
 *  first). */
inline constexpr size_t kDefaultMaxCompiled = 64;

/** Executes a Plan; thread-safe: every run is handed to an MLX worker, and runs on different
 *  workers proceed concurrently (each worker has its own compiled functions). */
class PartitionRunner {
 public:
  /** `compile` false runs the traced graph eagerly (ONNXRUNTIME_EP_MLX_NO_COMPILE); at most
   *  `max_compiled` compiled functions are kept per MLX worker (0: no bound;
   *  ONNXRUNTIME_EP_MLX_MAX_COMPILED), so at most MlxWorkerCount() * max_compiled in all. */
  PartitionRunner(Plan plan, bool compile, size_t max_compiled = kDefaultMaxCompiled);
  /** Pads the prompt's token axis to buckets of at least `min_bucket` rows (powers of two) where
   *  that is exact (runner_buckets.cc); 0: never (the default). Set before the first run. */
  void set_prompt_buckets(int64_t min_bucket) { min_bucket_ = min_bucket; }
  /** Releases each worker's compiled functions on that worker. */
  ~PartitionRunner();

  /** Runs the partition and writes every output into the buffer `sink` gives for it. */
  void Run(const std::vector<InputTensor>& inputs, const OutputSink& sink);
  /** Runs the partition and returns the outputs as host tensors (tests and tools). */
  std::vector<Tensor> Run(const std::vector<InputTensor>& inputs);

  /** The plan. */
  const Plan& plan() const { return plan_; }
  /** A snapshot of the counters. */
  RunnerStats stats() const;
  /** The session's ORT logger, for the partition's log lines (null: ORT's default logger). Set
   *  before the first run; it must outlive the runs. */
  void set_logger(const OrtLogger* logger) { logger_ = logger; }

 private:
  const OrtLogger* logger_ = nullptr;
  std::atomic<bool> logged_refusal_{false};  // the verbose log names one unadopted output per partition
  using MlxFunction = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;
  /** The input signature a compiled function is specialised for: per input its type, rank and
   *  dims, and the bytes of host inputs packed in words. Compared exactly (no string building:
   *  this is on every run's path). */
  using SignatureKey = std::vector<int64_t>;
  struct SignatureHash {
    size_t operator()(const SignatureKey& key) const noexcept;
  };
  /** A function for every value of some input dims (docs/dynamic_shapes.md). */
  struct DynamicEntry {
    std::vector<std::pair<size_t, size_t>> dims;  ///< (input, axis) per symbol
    DynamicAxes axes;                             ///< per input, per axis: symbol or -1
    Prologue prologue;
    std::vector<mx::Shape> trace_shapes;  ///< the inputs' shapes when traced (placeholders)
    std::vector<mx::Dtype> dtypes;
    mx::Device device = mx::Device::cpu;
    bool IsDynamic(size_t input) const {
      return std::any_of(axes[input].begin(), axes[input].end(), [](int s) { return s >= 0; });
    }
  };
  struct CacheEntry {
    MlxFunction fn;
    std::vector<std::shared_ptr<const Tensor>> host_values;  // baked into fn, kept alive with it
    std::list<SignatureKey>::iterator lru;                   // this entry's place in its lru
    /** What fn's runtime checks say when they fail (filled by its first trace). */
    std::shared_ptr<std::vector<std::string>> check_messages;
    /** Per check: an assumption of a dynamic trace (filled by its first trace). */
    std::shared_ptr<std::vector<bool>> check_is_assumption;
    /** Set for a function with dynamic dims: fn takes the static inputs, the dynamic ones' shapes
     *  and the prologue's values. */
    std::shared_ptr<const DynamicEntry> dynamic;
    /** fn's outputs that are inputs updated in place (filled by its first trace). */
    std::shared_ptr<std::vector<InPlaceOutput>> in_place;
    /** A function of padded inputs: per output, the axis to cut to the prompt's rows (-1: whole),
     *  or empty with `refusal` set (filled by its first trace). */
    struct RowAxes {
      std::vector<int> axes;
      std::string refusal;
    };
    std::shared_ptr<RowAxes> rows;
    /** The function fn compiles (for Call's second compile; cleared when that fails) and the scalar
     *  leaves its trace hid behind Contiguous primitives (filled by its first trace). */
    MlxFunction traced = nullptr;
    std::shared_ptr<ScalarInputs> scalars = nullptr;
    /** From its second call on: the same function taking those leaves as inputs after fn's. */
    MlxFunction with_scalars = nullptr;
  };
  /** A run's padding: the prompt's length, its bucket, and per input the padded axis or -1. */
  struct Bucket {
    int64_t length = 0, padded = 0;
    std::vector<int> axes;
  };
  /** What Evaluate used, for Execute's checks. */
  struct Evaluated {
    std::shared_ptr<std::vector<std::string>> check_messages;
    std::shared_ptr<std::vector<bool>> check_is_assumption;
    std::optional<SignatureKey> dynamic_key;               ///< the key of the dynamic entry used
    std::shared_ptr<std::vector<InPlaceOutput>> in_place;  ///< fn's in-place outputs
    uint64_t graph_us = 0;  ///< time Evaluate took (building the graph), for RunnerStats
    /** With device writes: whether the aliased outputs' offsets are in range (int32 [1]),
     *  evaluated with the outputs (EvalExceptAliased). */
    std::optional<mx::array> offsets_ok;
    /** What EvalExceptAliased evaluated asynchronously (AsyncRunEvaluation): waited for before
     *  the run returns. */
    std::vector<mx::array> pending;
  };

  /** The device a signature runs on: the runtime device, except that graphs holding an empty
   *  tensor run on MLX's CPU device (MLX's CUDA backend divides by zero launching some kernels
   *  over zero elements, which kills the process with SIGFPE). Tracing without evaluation is
   *  cheap, so this costs one extra trace per new signature on GPUs only. */
  mx::Device ChooseDevice(const std::vector<mx::array>& inputs, const std::vector<const Tensor*>& host) const;
  /** Traces the plan for `device` and counts the trace. */
  std::vector<mx::array> Trace(const std::vector<mx::array>& inputs, const std::vector<const Tensor*>& host,
                               mx::Device device, std::vector<std::string>* check_messages = nullptr,
                               std::vector<bool>* check_is_assumption = nullptr,
                               const DynamicTrace* dynamic = nullptr,
                               std::vector<InPlaceOutput>* in_place = nullptr, RowTracker* rows = nullptr,
                               ScalarInputs* scalars = nullptr);
  /** entry's function on `inputs`: fn, and from the entry's second call on its compile with the
   *  trace's scalar leaves as inputs (ScalarInputs), when it has any and that trace succeeds. */
  std::vector<mx::array> Call(CacheEntry& entry, const std::vector<mx::array>& inputs);
  /** One MLX worker's compiled functions and what it learnt about varying dims. MLX keeps
   *  compile caches per thread, so a compiled function is only called, and released, on the
   *  worker that made it; nothing else touches this, and it needs no lock. */
  struct WorkerCache {
    std::unordered_map<SignatureKey, CacheEntry, SignatureHash> entries;
    std::list<SignatureKey> lru;  // keys of entries, most recently used first
    // Dynamic dims (docs/dynamic_shapes.md), as this worker saw the runs it ran.
    std::vector<std::vector<int64_t>> first_shapes;   // per input: its shape in the first run
    std::vector<std::vector<bool>> varying;           // per input, per axis: seen with another size
    std::set<std::pair<size_t, size_t>> static_dims;  // (input, axis) that cannot be dynamic
    std::set<SignatureKey> unbucketable;              // padded signatures whose padding is not exact
  };

  /** The calling worker's compiled function for `key`, or nullptr (a miss); counts the hit or
   *  miss if `count`. */
  CacheEntry* Find(const SignatureKey& key, bool count = true);
  /** Drops the calling worker's entry for `key`, if any. */
  void Erase(const SignatureKey& key);
  /** Adds the compiled function for `key` to the calling worker's cache and keeps its bound. */
  CacheEntry& Insert(const SignatureKey& key, CacheEntry entry);
  /** The signature of `inputs` (types, shapes, host inputs' bytes), the sizes of `dynamic` dims
   *  (input, axis) left out. */
  SignatureKey MakeKey(const std::vector<InputTensor>& inputs,
                       const std::vector<std::pair<size_t, size_t>>* dynamic = nullptr) const;
  /** Adds the time since `start` to stats_.trace_us. */
  void CountTraceTime(std::chrono::steady_clock::time_point start);
  /** Notes which input dims vary between runs; returns those to try as dynamic now. */
  std::vector<std::pair<size_t, size_t>> DynamicDims(const std::vector<InputTensor>& inputs);
  /** The outputs from a function with dynamic dims, or nullopt (none can serve these inputs). */
  std::optional<std::vector<mx::array>> EvaluateDynamic(const std::vector<InputTensor>& inputs,
                                                        const std::vector<mx::array>& arrays,
                                                        Evaluated& used);
  /** The run's bucket: the input dims that have varied between runs all hold one length >= 2
   *  here (a first prompt: input_ids and attention_mask), or nullopt. */
  std::optional<Bucket> ChooseBucket(const std::vector<InputTensor>& inputs);
  /** The compiled function of the padded inputs, traced (with the row-locality proof) on a miss;
   *  null when its padding is not exact. */
  CacheEntry* BucketedEntry(const Bucket& b, const SignatureKey& key,
                            const std::vector<InputTensor>& padded_inputs,
                            const std::vector<mx::array>& padded, std::vector<mx::array>& outputs);
  /** The run through its bucket: evaluated outputs cut to the prompt's rows (the in-place rows
   *  too), as EvaluateChecked gives them; nullopt to run it unpadded (a refused proof, a failed
   *  check, an in-place output ORT did not alias). */
  std::optional<std::vector<mx::array>> EvaluateBucketed(
      const Bucket& b, const std::vector<InputTensor>& inputs, const std::vector<mx::array>& arrays,
      const OutputSink& sink, Evaluated& used, std::vector<void*>& given, std::vector<bool>& aliased);
  /** Traces a function with dynamic `dims` for these inputs (throws DynamicShapeUnsupported). */
  CacheEntry MakeDynamicEntry(const std::vector<std::pair<size_t, size_t>>& dims,
                              const std::vector<InputTensor>& inputs, const std::vector<mx::array>& arrays);
  /** A dynamic entry's function's inputs for `arrays` (runs the prologue). */
  std::vector<mx::array> DynamicInputs(const DynamicEntry& d, const std::vector<mx::array>& arrays);
  /** Calls a dynamic entry: its prologue, then its function. */
  std::vector<mx::array> CallDynamic(CacheEntry& entry, const std::vector<mx::array>& arrays);
  /** Copies of the host inputs' values (null for the others), for a trace. */
  std::vector<std::shared_ptr<const Tensor>> HostValues(const std::vector<InputTensor>& inputs) const;
  /** The partition's (unevaluated) outputs for `arrays`: the compiled function for the inputs'
   *  signature, traced and compiled on a miss; the traced graph when not compiling. When the
   *  plan has runtime checks, their verdict is one more output; `used` says which checks, and
   *  which outputs are inputs updated in place (their rows and offsets follow the verdict). */
  std::vector<mx::array> Evaluate(const std::vector<InputTensor>& inputs,
                                  const std::vector<mx::array>& arrays, Evaluated& used);
  /** Writes the evaluated outputs into the buffers `sink` gives, except those marked `skip`;
   *  counts the bytes. */
  void WriteOutputs(const std::vector<mx::array>& outputs, const OutputSink& sink,
                    const std::vector<bool>& skip = {}, std::vector<mx::array>* writes = nullptr);
  /** Writes output `a` into `dst`: with device writes (`writes` given) a device kernel appended
   *  to `writes` (the caller evaluates them) where `dst` is EP memory; else a host copy. Returns
   *  whether a kernel does it. */
  bool WriteOutput(const mx::array& a, void* dst, std::vector<mx::array>* writes);
  /** For each in-place output whose buffer ORT can be asked for before evaluation: that buffer
   *  (`given`, by output) and whether it is its input's own (`aliased`, by output). */
  void ProbeInPlace(const std::vector<InputTensor>& inputs, const std::vector<mx::array>& outputs,
                    const std::vector<InPlaceOutput>& in_place, const OutputSink& sink,
                    std::vector<void*>& given, std::vector<bool>& aliased);
  /** Evaluates the outputs (and the checks' verdict) except the `aliased` ones, and the rows and
   *  offsets of those. */
  /** With device writes, also the verdict on the aliased outputs' offsets (Evaluated::offsets_ok). */
  /** Under AsyncRunEvaluation the evaluation is only started and its arrays go to `pending`. */
  std::optional<mx::array> EvalExceptAliased(const std::vector<mx::array>& outputs,
                                             const std::vector<InPlaceOutput>& in_place,
                                             const std::vector<bool>& aliased, bool has_checks,
                                             std::vector<mx::array>& pending);
  /** Writes the rows of each aliased in-place output into its buffer; counts the bytes. False,
   *  writing nothing, when an offset is out of range (then the outputs are written whole). With
   *  device writes (`ok` given) the writes are kernels appended to `writes`, for the caller to
   *  evaluate. Under AsyncRunEvaluation `ok` is not read first: the kernels write only if it
   *  holds, and `verdict_pending` says the caller must read it after evaluating them (the rows'
   *  bytes, `device_bytes`, are counted then). */
  bool WriteInPlace(const std::vector<mx::array>& outputs, const std::vector<InPlaceOutput>& in_place,
                    const std::vector<void*>& given, const std::vector<bool>& aliased,
                    const std::optional<mx::array>& ok, std::vector<mx::array>& writes, bool& verdict_pending,
                    uint64_t& device_bytes);
  /** WriteInPlace's device kernels; false (nothing launched) when a buffer is not EP memory. */
  bool WriteInPlaceOnDevice(const std::vector<mx::array>& outputs, const std::vector<InPlaceOutput>& in_place,
                            const std::vector<void*>& given, const std::vector<bool>& aliased,
                            const mx::array& ok, std::vector<mx::array>& writes, uint64_t& device_bytes);
  /** Evaluate, then the outputs (but those written in place: `aliased`, their buffers `given`)
   *  and the runtime checks; a failed assumption of a dynamic function retraces for the shapes.
   *  Throws the message of any other failed check. */
  std::vector<mx::array> EvaluateChecked(const std::vector<InputTensor>& inputs,
                                         const std::vector<mx::array>& arrays, const OutputSink& sink,
                                         Evaluated& used, std::vector<void*>& given,
                                         std::vector<bool>& aliased);
  /** Logs the primitives MLX evaluates for `outputs` (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS: those a
   *  run evaluates, so not the whole buffers written in place), when
   *  they differ from the last census logged. Counted on a partition's first 8 runs and every
   *  32nd after: the walk itself would be part of every timed run's eval. */
  void LogCensus(const std::vector<mx::array>& outputs);
  /** The body of Run, on an MLX worker. */
  void Execute(const std::vector<InputTensor>& inputs, const OutputSink& sink);

  Plan plan_;
  bool compile_;
  mutable std::mutex mu_;
  size_t max_compiled_;
  int64_t min_bucket_ = 0;
  std::vector<WorkerCache> caches_;  // one per MLX worker, indexed by CurrentMlxWorker()
  RunnerStats stats_;
  /** By output: ORT once gave the input's own buffer for this in-place output (with device memory
   *  the buffer is asked for before evaluation only then, so that other outputs stay adoptable). */
  std::unique_ptr<std::atomic<bool>[]> alias_seen_;  // atomic: several MLX workers run one runner
  ConstantFolder folder_;                            // the traces' constant subgraphs, evaluated once
  std::string last_census_;  // the last census logged (ONNXRUNTIME_EP_MLX_GRAPH_CENSUS), under mu_
  std::atomic<uint64_t> census_calls_{0};
};

}  // namespace mlx_ep
