#include "runtime/device.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/env.h"
#include "mlx/allocator.h"
#include "mlx/backend/cuda/cuda.h"
#include "mlx/backend/metal/metal.h"
#include "mlx/memory.h"

namespace mlx_ep {
namespace {

// MLX's CPU-only allocator (mlx/backend/no_gpu/allocator.cpp in MLX 0.32) has no make_buffer, so
// mx::array(void*, shape, dtype, deleter) copies. Its Buffer points at a size_t header holding the
// size, and the data is the word after it (Buffer::raw_ptr). True when this MLX's allocator lays
// its buffers out so: checked once on a buffer of its own (Metal's and CUDA's buffers are objects
// whose data lies elsewhere, so the check fails there and nothing is wrapped).
bool HeaderBeforeData() {
  static const bool same = [] {
    mx::allocator::Allocator& a = mx::allocator::allocator();
    mx::allocator::Buffer b = a.malloc(64);
    const bool ok = b.ptr() && b.raw_ptr() == static_cast<char*>(b.ptr()) + sizeof(size_t) && a.size(b) == 64;
    a.free(b);
    return ok;
  }();
  return same;
}

/** On MLX's CPU device: the bytes of freed buffers MLX keeps to reuse
 *  (ONNXRUNTIME_EP_MLX_CPU_CACHE_MB, default a quarter of MLX's memory limit, at least MLX's own
 *  32 MB). MLX's CPU allocator caches 32 MB; a model whose run frees more (NudeNet at 320x320)
 *  went back to malloc for its large buffers every run, which the C library serves by mmap:
 *  1,300 page faults and 3.3 ms of kernel time a 35 ms run. ORT's CPU EP keeps its arena too. */
void ConfigureCpuCache() {
  constexpr size_t kMlxDefault = size_t{32} << 20;
  size_t limit = std::max(kMlxDefault, mx::get_memory_limit() / 4);
  const std::string mb = EnvString(env::kCpuCacheMb);
  if (!mb.empty() && mb.size() <= 9 && mb.find_first_not_of("0123456789") == std::string::npos)
    limit = static_cast<size_t>(std::stoull(mb)) << 20;
  mx::set_cache_limit(limit);
}

}  // namespace

mx::Device RuntimeDevice() {
  static const mx::Device device = [] {
    const std::string want = EnvString(env::kDevice);
    if (want != "cpu" && mx::is_available(mx::Device(mx::Device::gpu))) return mx::Device(mx::Device::gpu);
    ConfigureCpuCache();
    return mx::Device(mx::Device::cpu);
  }();
  return device;
}

namespace {

/** `is_available` of one of MLX's backends: constants of the build (each backend's stubs say
 *  false, or throw), no GPU touched. */
bool BuiltWith(bool (*is_available)()) {
  try {
    return is_available();
  } catch (...) {
    return false;
  }
}

}  // namespace

bool MlxBuiltWithCuda() {
  static const bool cuda = BuiltWith(mx::cu::is_available);
  return cuda;
}

const char* MlxBackendName() {
  if (MlxBuiltWithCuda()) return "cuda";
  if (BuiltWith(mx::metal::is_available)) return "metal";
  return "cpu";
}

bool CudaKernelsAvailable(mx::Stream s) { return s.device == mx::Device::gpu && MlxBuiltWithCuda(); }

bool IsCudaKernelFloat(mx::Dtype t) { return t == mx::float16 || t == mx::bfloat16 || t == mx::float32; }

std::optional<mx::array> WrapHostMemory(const void* p, const mx::Shape& shape, mx::Dtype dtype,
                                        std::shared_ptr<const void> owner) {
  // The header word before `p` is read by MLX (array::buffer_size, only to choose between sharing
  // and copying a buffer, both correct); it lies on p's own page unless p starts one.
  constexpr uintptr_t kMinPage = 4096;
  if (!p || reinterpret_cast<uintptr_t>(p) % kMinPage < sizeof(size_t) || !HeaderBeforeData())
    return std::nullopt;
  mx::allocator::Buffer view(static_cast<size_t*>(const_cast<void*>(p)) - 1);
  return mx::array(mx::allocator::Data(view, [owner = std::move(owner)](mx::allocator::Buffer) {}), shape,
                   dtype);
}

}  // namespace mlx_ep
