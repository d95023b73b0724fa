// Device-side writes of a run's results (device_writes.h).
#include "runtime/device_writes.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/env.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "runtime/device.h"
#include "runtime/memory.h"

namespace mlx_ep {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxThreads = int64_t{1} << 22;  // a grid-stride loop covers the rest

// T (a template argument, one kernel per dtype) is copied bitwise. One block of rows: `p` its
// six params (outer, per_entry, len, seq, inner, room; elements of T), `src`, `offsets` and `out`
// its pointers (`dst` is declared const by MLX, an input: the write goes through a cast, into
// ORT's buffer). Both kernels below end with it.
constexpr const char* kBlockCopySource = R"(
  const int64_t outer = p[0], per_entry = p[1], len = p[2], seq = p[3], inner = p[4], room = p[5];
  const int64_t chunk = seq * inner, total = outer * chunk;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (blockIdx.y == 0 && first == 0) done[0] = ok[0];
  if (ok[0] == 0) return;
  for (int64_t i = first; i < total; i += step) {
    const int64_t o = i / chunk;
    const int64_t off = offsets[o / per_entry];
    if (off < 0 || off > room) continue;
    out[(o * len + off) * inner + (i - o * chunk)] = src[i];
  }
)";

// One block: the kernel's inputs src, offsets, dst and params are the block's.
const std::string& RowsIntoSource() {
  static const std::string source =
      std::string("  const int64_t* p = params;\n  T* out = const_cast<T*>(dst);\n") + kBlockCopySource;
  return source;
}

const mx::fast::CustomKernelFunction& RowsIntoKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_rows_into", {"src", "offsets", "dst", "ok", "params"}, {"done"},
                            RowsIntoSource(), "", /*ensure_row_contiguous=*/true);
  return kernel;
}

mx::array Launch(const mx::array& dst, const mx::array& src, const mx::array& offsets, const mx::array& ok,
                 const std::vector<int64_t>& params, mx::Stream s) {
  const int64_t total = params[0] * params[3] * params[4];
  const int threads = static_cast<int>(std::clamp<int64_t>(total, 1, kMaxThreads));
  return RowsIntoKernel()({src, offsets, dst, ok, KernelParams(params)}, {{1}}, {mx::int32}, {threads, 1, 1},
                          {kThreadsPerBlock, 1, 1}, {{"T", dst.dtype()}}, std::nullopt, false, s)[0];
}

// The same copy for n blocks, block b in blockIdx.y (one launch). The generated source names
// its inputs src<b>, off<b>, dst<b> (MLX's kernels take named inputs, not arrays of them) and
// picks block b's three with a switch: arrays of the n pointers indexed by blockIdx.y lived in
// each thread's stack (24 bytes a block, 1 KiB for a decode step's 44, written by every thread
// before its copy), which made a 512-token prompt's write of 11 MB take 2.2 ms on an H100.
// params holds each block's six values.
std::string AllRowsIntoSource(int n) {
  std::string cases;
  for (int b = 0; b < n; ++b) {
    const std::string i = std::to_string(b);
    cases += "    case " + i + ": src = src" + i + "; offsets = off" + i + "; out = const_cast<T*>(dst" + i +
             "); break;\n";
  }
  return R"(
  const int b = blockIdx.y;
  const int64_t* p = params + 6 * b;
  const T* src = nullptr;
  const int32_t* offsets = nullptr;
  T* out = nullptr;
  switch (b) {
)" + cases +
         R"(    default: return;
  }
)" + kBlockCopySource;
}

/** The kernel for n blocks, made once per n for the process. */
const mx::fast::CustomKernelFunction& AllRowsIntoKernel(int n) {
  static std::mutex mu;
  static std::map<int, mx::fast::CustomKernelFunction> kernels;
  std::lock_guard<std::mutex> lock(mu);
  auto it = kernels.find(n);
  if (it != kernels.end()) return it->second;
  std::vector<std::string> names;
  for (const char* kind : {"src", "off", "dst"})
    for (int b = 0; b < n; ++b) names.push_back(kind + std::to_string(b));
  names.insert(names.end(), {"ok", "params"});
  return kernels
      .emplace(n, mx::fast::cuda_kernel("mlx_ep_all_rows_into_" + std::to_string(n), names, {"done"},
                                        AllRowsIntoSource(n), "", /*ensure_row_contiguous=*/true))
      .first->second;
}

/** One launch for `blocks` (all of one dst dtype). */
mx::array LaunchAll(const std::vector<const RowsWrite*>& blocks, const mx::array& ok, mx::Stream s) {
  const int n = static_cast<int>(blocks.size());
  std::vector<mx::array> inputs;
  std::vector<int64_t> params;
  int64_t most = 1;
  for (const RowsWrite* w : blocks) inputs.push_back(w->rows);
  // The source reads offsets as int32 (InPlaceUpdate's type; a cast should another come).
  for (const RowsWrite* w : blocks)
    inputs.push_back(w->offsets.dtype() == mx::int32 ? w->offsets : mx::astype(w->offsets, mx::int32, s));
  for (const RowsWrite* w : blocks) {
    inputs.push_back(w->dst);
    const RowsLayout l = RowsLayoutOf(w->dst.shape(), w->axis, w->rows.shape(w->axis));
    params.insert(params.end(), {l.outer, l.per_entry, l.len, l.seq, l.inner, l.room()});
    most = std::max(most, l.outer * l.seq * l.inner);
  }
  inputs.push_back(ok);
  inputs.push_back(KernelParams(params));
  const int threads = static_cast<int>(std::clamp<int64_t>(most, 1, kMaxThreads));
  return AllRowsIntoKernel(n)(inputs, {{1}}, {mx::int32}, {threads, n, 1}, {kThreadsPerBlock, 1, 1},
                              {{"T", blocks[0]->dst.dtype()}}, std::nullopt, false, s)[0];
}

}  // namespace

mx::array KernelParams(const std::vector<int64_t>& params) {
  constexpr size_t kMaxKept = 256;  // distinct layouts: a model's few, times the prompt lengths seen
  static std::mutex mu;
  static auto* kept = new std::map<std::vector<int64_t>, mx::array>;  // never destroyed: process exit
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = kept->find(params); it != kept->end()) return it->second;
  if (kept->size() >= kMaxKept) kept->clear();  // the arrays live on in the graphs that hold them
  return kept->emplace(params, mx::array(params.begin(), {static_cast<int>(params.size())}, mx::int64))
      .first->second;
}

std::string DeviceWritesSourceForTests(int n) { return n == 0 ? RowsIntoSource() : AllRowsIntoSource(n); }

bool DeviceWritesEnabled() {
  static const bool enabled = [] {
    if (!DeviceMemoryEnabled() || RuntimeDevice() != mx::Device(mx::Device::gpu)) return false;
    // On by default; =0 restores the host's copies (docs/gpu_memory.md, "Device writes").
    if (EnvOff(env::kDeviceWrites)) return false;
    return MlxBuiltWithCuda();  // not Metal: its buffers are the host's, the host's writes cost nothing extra
  }();
  return enabled;
}

bool AsyncRunEvaluation() {
  // Where device writes are on (a CUDA GPU) by default since the sixteenth session's H200 run
  // (TinyLlama decode 6.06 -> 5.87 ms fp16, 7.31 -> 6.66 int4, medians of two rounds);
  // "1" waits for the graph before the writes again. "async" asks for it anywhere (the CPU
  // device's tests, with device memory forced).
  static const bool on = [] {
    const char* v = std::getenv(env::kDeviceWrites);
    return v ? EnvString(env::kDeviceWrites) == "async" : DeviceWritesEnabled();
  }();
  return on;
}

bool AsyncRunEvaluation(const std::vector<mx::array>& arrays) {
  if (!AsyncRunEvaluation()) return false;
  if (RuntimeDevice() == mx::Device(mx::Device::cpu)) return true;
  return std::none_of(arrays.begin(), arrays.end(), [](const mx::array& a) {
    return a.has_primitive() && a.primitive().stream().device == mx::Device::cpu;
  });
}

mx::array OffsetsInRange(const std::vector<std::pair<mx::array, int64_t>>& offsets_and_room, mx::Stream s) {
  // One concatenation per distinct room (in practice one: every KV buffer of a model has the same
  // length), then its min and max: a handful of primitives for any number of layers. An array
  // shared by several writes (the layers' one offsets output, plan.cc) is checked once, so a
  // decoder's usual single array needs no Concatenate.
  std::map<int64_t, std::vector<mx::array>> by_room;
  for (const auto& [offsets, room] : offsets_and_room) {
    std::vector<mx::array>& arrays = by_room[room];
    const std::uintptr_t id = offsets.id();  // a lambda may not capture a structured binding (C++17)
    if (std::none_of(arrays.begin(), arrays.end(), [id](const mx::array& a) { return a.id() == id; }))
      arrays.push_back(offsets);
  }
  std::optional<mx::array> ok;
  for (auto& [room, arrays] : by_room) {
    const mx::array all = arrays.size() == 1 ? arrays[0] : mx::concatenate(arrays, 0, s);
    const mx::array in_range = mx::logical_and(
        mx::greater_equal(mx::min(all, s), mx::array(0, all.dtype()), s),
        mx::less_equal(mx::max(all, s), mx::array(static_cast<int32_t>(room), all.dtype()), s), s);
    ok = ok ? mx::logical_and(*ok, in_range, s) : in_range;
  }
  if (!ok) return mx::array({1}, mx::int32);
  return mx::reshape(mx::astype(*ok, mx::int32, s), {1}, s);
}

RowsLayout RowsLayoutOf(const mx::Shape& shape, int axis, int seq) {
  RowsLayout l;
  for (int d = 0; d < axis; ++d) l.outer *= shape[d];
  for (int d = 1; d < axis; ++d) l.per_entry *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) l.inner *= shape[d];
  l.len = shape[axis];
  l.seq = seq;
  return l;
}

std::vector<mx::array> WriteAllRowsInto(const std::vector<RowsWrite>& blocks, const mx::array& ok,
                                        mx::Stream s) {
  // Grouped by dtype (the kernel's T), at most kMaxBlocks a launch (its parameter space: three
  // pointers a block).
  constexpr size_t kMaxBlocks = 128;
  std::vector<mx::array> launches;
  // ONNXRUNTIME_EP_MLX_DEVICE_WRITES=per-block: a launch each (the first kernel's; A/B).
  static const bool per_block = EnvString(env::kDeviceWrites) == "per-block";
  if (per_block) {
    for (const RowsWrite& w : blocks) {
      const RowsLayout l = RowsLayoutOf(w.dst.shape(), w.axis, w.rows.shape(w.axis));
      const std::vector<int64_t> params = {l.outer, l.per_entry, l.len, l.seq, l.inner, l.room()};
      launches.push_back(Launch(w.dst, w.rows, w.offsets, ok, params, s));
    }
    return launches;
  }
  std::map<mx::Dtype::Val, std::vector<const RowsWrite*>> by_dtype;
  for (const RowsWrite& w : blocks) by_dtype[w.dst.dtype().val()].push_back(&w);
  for (const auto& [dtype, group] : by_dtype)
    for (size_t at = 0; at < group.size(); at += kMaxBlocks)
      launches.push_back(
          LaunchAll({group.begin() + at, group.begin() + std::min(group.size(), at + kMaxBlocks)}, ok, s));
  return launches;
}

mx::array WriteInto(const mx::array& dst, const mx::array& src, mx::Stream s) {
  const int64_t size = static_cast<int64_t>(src.size());
  // Arrays with data, not primitives: nothing more to evaluate than the copy.
  const mx::array zero({0}, mx::int32), one({1}, mx::int32);
  return Launch(dst, src, zero, one, {1, 1, 1, 1, size, 0}, s);
}

}  // namespace mlx_ep
