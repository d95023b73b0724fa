// A run's results written into ORT's buffers by a small MLX kernel on a CUDA GPU
// (docs/gpu_memory.md, "Which bytes move per run").
//
// With device memory on, ORT's tensors of MLX partitions are MLX managed memory
// (runtime/memory.h). Written from the host (memcpy), their pages migrate to the host and back to
// the device for the next kernel; and a kernel's result read on the host (`data()`) first moves
// out of the CUDA memory pool into newly allocated managed memory with a synchronous copy. On the
// H200 that cost 5.5 ms of a 16.6 ms TinyLlama decode step (44 blocks of KV rows and the logits).
// Copied by a kernel instead, nothing crosses to the host but one flag.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** Where rows written along `axis` (>= 1) go in a buffer of `shape`, in elements: for each index
 *  o over the axes before `axis`, `seq` rows of `inner` elements at position offsets[o /
 *  per_entry] of the axis's `len`. The host's writes (PartitionRunner::WriteInPlace) and the
 *  kernel's both follow it. */
struct RowsLayout {
  int64_t outer = 1, per_entry = 1, len = 0, seq = 0, inner = 1;
  int64_t room() const { return len - seq; }  ///< the largest offset whose rows fit
};
RowsLayout RowsLayoutOf(const mx::Shape& shape, int axis, int seq);

/** True when outputs and in-place rows are written by device kernels: device memory on, the
 *  runtime device a CUDA GPU, and ONNXRUNTIME_EP_MLX_DEVICE_WRITES not turned off ("0"). */
bool DeviceWritesEnabled();

/** Whether a run's graph is evaluated asynchronously
 *  (mx::async_eval) and the host waits once, after the device writes, which MLX runs after it on
 *  the same stream, where it waited for the graph and then for the writes (PartitionRunner::
 *  Execute). Reads on the host (host writes, the offsets' verdict) wait for their arrays. The
 *  default where device writes are on (a CUDA GPU; ONNXRUNTIME_EP_MLX_DEVICE_WRITES=1 waits
 *  twice again); ONNXRUNTIME_EP_MLX_DEVICE_WRITES=async on any device, so that MLX's CPU device
 *  tests the waits. */
bool AsyncRunEvaluation();

/** AsyncRunEvaluation for a run that evaluates `arrays`: false where one of them is work of
 *  MLX's CPU device while the runtime device is a GPU (a graph holding an empty tensor runs there,
 *  PartitionRunner::ChooseDevice). The device writes, on the GPU's stream, would wait for the CPU
 *  stream's asynchronous evaluation inside a kernel (MLX's event_wait_kernel spins until
 *  event_signal_kernel, launched on another stream once the CPU is done, raises a flag). On the
 *  H200 that wait never ended: every parity file's first empty-tensor test hung there (seventeenth
 *  and eighteenth sessions). MLX alone hangs the same way and finishes with
 *  CUDA_MODULE_LOADING=EAGER, so CUDA's lazy loading most likely holds the signal kernel's launch
 *  until the context is idle, which the spinning kernel never lets it be (tools/gpu/
 *  cpu_gpu_event.py; docs/reliability.md, "A GPU waiting for the CPU"). */
bool AsyncRunEvaluation(const std::vector<mx::array>& arrays);

/** int32 [1]: 1 when every offset of each array lies in [0, room] (its pair's room), else 0. */
mx::array OffsetsInRange(const std::vector<std::pair<mx::array, int64_t>>& offsets_and_room, mx::Stream s);

/** One block of rows for WriteAllRowsInto: `rows` written into `dst` along `axis` (>= 1) as
 *  RowsLayout says, as PartitionRunner::WriteInPlace does on the host. `dst` is an array over
 *  ORT's buffer (WrapDeviceMemory), row-contiguous; MLX sees it as an input, not the write, so
 *  evaluate the writes after everything that reads `dst`. */
struct RowsWrite {
  mx::array dst, rows, offsets;
  int axis = 1;
};

/** The arrays whose evaluation writes every block, one kernel launch per dtype of `dst` (a
 *  decode step's 44 KV blocks: one launch, where each took one, and MLX pays host work per
 *  launch). Nothing is written unless `ok` (int32 [1], OffsetsInRange) is nonzero. */
std::vector<mx::array> WriteAllRowsInto(const std::vector<RowsWrite>& blocks, const mx::array& ok,
                                        mx::Stream s);

/** The write kernels' params (int64 [n]) as an array kept for the process, one per distinct
 *  value. Made from host data, such an array lives in managed memory; made afresh each run, its
 *  pages were written by the host just before a kernel read them, which the GPU must fault over
 *  each time: the likely reason why the eighteenth session's H200 timeline had each write launch
 *  at ~200 µs whatever it wrote (a decode step's 64 KB of logits 223 µs, its 44 KV rows of 512 B
 *  215 µs). A kept array's pages stay on the GPU after its first run (not yet measured there).
 *  Arrays without a primitive are shared between MLX threads as the partitions' constants are
 *  (docs/reliability.md, "Threads"). */
mx::array KernelParams(const std::vector<int64_t>& params);

/** The write kernels' bodies as MLX's cuda_kernel receives them (n = 0: one block's; n >= 1: the
 *  all-blocks kernel for n blocks), for a test that runs them on the host. */
std::string DeviceWritesSourceForTests(int n);

/** An array whose evaluation copies all of `src` into `dst` (same size and dtype; `dst` as above). */
mx::array WriteInto(const mx::array& dst, const mx::array& src, mx::Stream s);

}  // namespace mlx_ep
