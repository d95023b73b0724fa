// Host-written CUDA managed memory moved to the GPU ahead of its first read.
//
// ORT copies a host input into the EP's memory with a host memcpy (abi/device_memory.cc): MLX's
// CUDA memory lent to ORT is managed memory, so its pages are then the host's, and the first
// kernel to read them takes the page faults. On the twenty-seventh session's H100 the one Sum of
// a TinyLlama decode step's attention mask took 183 us when the mask was bound from the host and
// 2.3 us when it was made once in the EP's memory. So, by default, the CUDA driver makes the copy
// (cuMemcpyHtoD: a copy engine writes the pages, and the thirtieth session's H200 read the mask
// in 1.7 us); with =1 the host's memcpy stays and cuMemPrefetchAsync moves the pages by DMA, on a
// stream of the EP's own (a hint: nothing waits for it). The CUDA driver is reached through
// dlopen: the EP does not link CUDA, and where MLX's CUDA backend has not loaded libcuda (the CPU,
// Metal) nothing happens.
#pragma once

#include <cstddef>

namespace mlx_ep {

/** MLX on a CUDA GPU, unless ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=0. */
bool PrefetchInputsEnabled();

/** With PrefetchInputsEnabled, unless ONNXRUNTIME_EP_MLX_PREFETCH_INPUTS=1: the copy itself made by
 *  the driver (CopyToGpu) instead of a host memcpy and a prefetch. The twenty-eighth session's
 *  H100 ran a decode step no faster with the prefetch alone (3.80 against 3.67 ms); with the
 *  driver's copy the thirtieth session's H200 read the mask in 1.7 us (cuda_prefetch.cc). */
bool DriverCopiesInputs();

/** Copies `bytes` from host memory `src` to managed (or device) memory `dst` by the CUDA driver
 *  (cuMemcpyHtoD, synchronous for pageable host memory): true when done, false where there is no
 *  CUDA driver in the process or it declined (then nothing was written). Never throws. */
bool CopyToGpu(void* dst, const void* src, size_t bytes);

/** Asks the CUDA driver to move `bytes` of managed memory at `ptr` to GPU 0 without waiting:
 *  true when it was asked, false where there is no CUDA driver in the process or the driver
 *  declined (memory that is not managed, say). Never throws. */
bool PrefetchToGpu(const void* ptr, size_t bytes);

}  // namespace mlx_ep
