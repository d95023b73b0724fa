// Device-side writes of a run's results (device_writes.h).
#include "runtime/device_writes.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "common/env.h"
#include "mlx/backend/cuda/cuda.h"
#include "mlx/fast.h"
#include "mlx/ops.h"
#include "runtime/device.h"
#include "runtime/memory.h"

namespace mlx_ep {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxThreads = int64_t{1} << 22;  // a grid-stride loop covers the rest

// T (a template argument, one kernel per dtype) is copied bitwise. params: outer, per_entry,
// len, seq, inner, room (elements of T). `dst` is declared const by MLX (an input): the write
// goes through a cast, into ORT's buffer.
constexpr const char* kRowsIntoSource = R"(
  const int64_t outer = params[0], per_entry = params[1], len = params[2], seq = params[3];
  const int64_t inner = params[4], room = params[5];
  const int64_t chunk = seq * inner, total = outer * chunk;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (first == 0) done[0] = ok[0];
  if (ok[0] == 0) return;
  T* out = const_cast<T*>(dst);
  for (int64_t i = first; i < total; i += step) {
    const int64_t o = i / chunk;
    const int64_t off = offsets[o / per_entry];
    if (off < 0 || off > room) continue;
    out[(o * len + off) * inner + (i - o * chunk)] = src[i];
  }
)";

const mx::fast::CustomKernelFunction& RowsIntoKernel() {
  static const mx::fast::CustomKernelFunction kernel =
      mx::fast::cuda_kernel("mlx_ep_rows_into", {"src", "offsets", "dst", "ok", "params"}, {"done"},
                            kRowsIntoSource, "", /*ensure_row_contiguous=*/true);
  return kernel;
}

mx::array Launch(const mx::array& dst, const mx::array& src, const mx::array& offsets, const mx::array& ok,
                 const std::vector<int64_t>& params, mx::Stream s) {
  const int64_t total = params[0] * params[3] * params[4];
  const int threads = static_cast<int>(std::clamp<int64_t>(total, 1, kMaxThreads));
  const mx::array p(params.begin(), {static_cast<int>(params.size())}, mx::int64);
  return RowsIntoKernel()({src, offsets, dst, ok, p}, {{1}}, {mx::int32}, {threads, 1, 1},
                          {kThreadsPerBlock, 1, 1}, {{"T", dst.dtype()}}, std::nullopt, false, s)[0];
}

}  // namespace

bool DeviceWritesEnabled() {
  static const bool enabled = [] {
    if (!DeviceMemoryEnabled() || RuntimeDevice() != mx::Device(mx::Device::gpu)) return false;
    // On by default; =0 restores the host's copies (docs/gpu_memory.md, "Device writes").
    if (std::getenv(env::kDeviceWrites) && !EnvFlag(env::kDeviceWrites)) return false;
    try {
      return mx::cu::is_available();
    } catch (...) {
      return false;  // Metal: its buffers are the host's, the host's writes cost nothing extra
    }
  }();
  return enabled;
}

mx::array OffsetsInRange(const std::vector<std::pair<mx::array, int64_t>>& offsets_and_room, mx::Stream s) {
  // One concatenation per distinct room (in practice one: every KV buffer of a model has the same
  // length), then its min and max: a handful of primitives for any number of layers.
  std::map<int64_t, std::vector<mx::array>> by_room;
  for (const auto& [offsets, room] : offsets_and_room) by_room[room].push_back(offsets);
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

mx::array WriteRowsInto(const mx::array& dst, const mx::array& rows, const mx::array& offsets, int axis,
                        const mx::array& ok, mx::Stream s) {
  const RowsLayout l = RowsLayoutOf(dst.shape(), axis, rows.shape(axis));
  return Launch(dst, rows, offsets, ok, {l.outer, l.per_entry, l.len, l.seq, l.inner, l.room()}, s);
}

mx::array WriteInto(const mx::array& dst, const mx::array& src, mx::Stream s) {
  const int64_t size = static_cast<int64_t>(src.size());
  // Arrays with data, not primitives: nothing more to evaluate than the copy.
  const mx::array zero({0}, mx::int32), one({1}, mx::int32);
  return Launch(dst, src, zero, one, {1, 1, 1, 1, size, 0}, s);
}

}  // namespace mlx_ep
