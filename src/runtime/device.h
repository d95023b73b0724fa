// Where MLX runs, and how host memory becomes MLX arrays without a copy.
#pragma once

#include <memory>
#include <optional>

#include "mlx/array.h"
#include "mlx/device.h"
#include "mlx/stream.h"

namespace mlx_ep {

namespace mx = mlx::core;

/** The device translations run on, chosen once per process: the GPU when MLX has one, unless
 *  ONNXRUNTIME_EP_MLX_DEVICE=cpu. */
mx::Device RuntimeDevice();

/** True when this MLX was built with its CUDA backend (a constant of the build: touches no GPU). */
bool MlxBuiltWithCuda();

/** Which backend this MLX was built with: "cuda", "metal" or "cpu" (a GPU may still be absent). */
const char* MlxBackendName();

/** True when stream `s` runs on the GPU of an MLX built with CUDA (custom CUDA kernels work). */
bool CudaKernelsAvailable(mx::Stream s);

/** True for the float types the EP's custom CUDA kernels take (float16, bfloat16, float32). */
bool IsCudaKernelFloat(mx::Dtype t);

/** Host memory `p` as an MLX array without a copy where this MLX's allocator allows it (its
 *  CPU-only allocator: see device.cc), else nullopt. The array never frees `p`; it holds `owner`
 *  (whatever keeps `p` alive, if anything) until MLX drops its last reference. MLX never donates
 *  a buffer it does not own, so it only reads `p`. */
std::optional<mx::array> WrapHostMemory(const void* p, const mx::Shape& shape, mx::Dtype dtype,
                                        std::shared_ptr<const void> owner = nullptr);

}  // namespace mlx_ep
