// Device memory that the EP lends ORT on a GPU runtime device (docs/gpu_memory.md).
//
// MLX's CUDA backend cannot wrap a device pointer it did not allocate, so ORT's tensors for MLX
// partitions come from MLX's own allocator: `mx::allocator::malloc` (CUDA managed memory,
// readable by kernels and by the host). A registry maps each pointer handed out to its MLX
// buffer, so that an input ORT gives back is wrapped as an mx::array without a copy, and an
// output can be handed to ORT as the very buffer MLX computed it in ("adopted": ORT's allocation
// for that output returns it). On the CPU device none of this is used: ORT's host memory is
// wrapped directly (runtime/runner.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "ops/op.h"

namespace mlx_ep {

/** True when ORT's tensors of MLX partitions live in MLX memory: on a GPU runtime device, unless
 *  ONNXRUNTIME_EP_MLX_DEVICE_MEMORY=0 (then inputs and outputs are copied through host memory);
 *  =force turns it on on the CPU device too (MLX's CPU allocator; the tests use it there). */
bool DeviceMemoryEnabled();

/** `bytes` of MLX memory for ORT (nullptr for 0 bytes); the next allocation on this thread is
 *  the adopted output's buffer when one is pending with exactly that size (AdoptScope). */
void* DeviceAlloc(size_t bytes);
/** Frees what DeviceAlloc returned (drops the adopted array's reference). */
void DeviceFree(void* p);
/** True when `p` points into memory DeviceAlloc returned and that is not yet freed. */
bool IsDeviceMemory(const void* p);
/** An array over the MLX memory at `p` without a copy: a DeviceAlloc pointer, or a pointer inside
 *  one (ORT's memory patterns place several tensors in one allocation), big enough for `shape`;
 *  nullopt when `p` is not such a pointer (or, inside an allocation, not aligned to `dtype`). */
std::optional<mx::array> WrapDeviceMemory(const void* p, const mx::Shape& shape, mx::Dtype dtype);

/** While alive, lets the next DeviceAlloc on this thread of exactly `a.nbytes()` bytes return
 *  `a`'s own data (its buffer then lives until ORT frees the pointer). `a` must be evaluated and
 *  Adoptable. */
class AdoptScope {
 public:
  explicit AdoptScope(const mx::array& a);
  ~AdoptScope();
  AdoptScope(const AdoptScope&) = delete;
  AdoptScope& operator=(const AdoptScope&) = delete;
  /** True when `dst` (what ORT's allocation returned) is the adopted array's data. */
  bool Adopted(const void* dst) const;

 private:
  const void* data_;
};

/** Bytes the EP's data transfer copied (ORT's copies at partition and session boundaries),
 *  process-wide since the library was loaded. */
struct TransferStats {
  uint64_t host_to_device = 0;
  uint64_t device_to_host = 0;
  uint64_t device_to_device = 0;
  uint64_t prefetched_to_gpu = 0;  // of host_to_device (runtime/cuda_prefetch.h)
};
TransferStats GetTransferStats();
/** Counts one copy of `bytes` by the data transfer. */
void CountTransfer(bool from_device, bool to_device, uint64_t bytes);
/** Counts `bytes` of a host-to-device copy the CUDA driver was asked to move to the GPU. */
void CountPrefetch(uint64_t bytes);

/** True when `a` can be handed to ORT as it is (see AdoptScope): the sole owner of a buffer
 *  from MLX's allocator, row-contiguous, without offset. Moves `a`'s data to memory the host can
 *  read (MLX's `data()`: a device-side copy out of the CUDA memory pool). */
bool Adoptable(const mx::array& a);
/** Why `a` is not Adoptable (nullptr when it is), for the verbose log. */
const char* AdoptRefusal(const mx::array& a);

}  // namespace mlx_ep
