// cuMemPrefetchAsync through dlopen (cuda_prefetch.h).
#include "runtime/cuda_prefetch.h"

#include <cstdint>

#include "common/env.h"
#include "runtime/cuda_driver_abi.h"
#include "runtime/device.h"

#if defined(__linux__)
#include <dlfcn.h>
#endif

namespace mlx_ep {

namespace {

namespace cu = cuda_driver;

/** The driver's functions, GPU 0's primary context (the one MLX's runtime API calls use) and a
 *  non-blocking stream of the EP's own: all set, or `prefetch` null. */
struct Driver {
  cu::MemPrefetchAsync prefetch = nullptr;
  cu::MemcpyHtoD copy = nullptr;
  cu::CtxPushCurrent push = nullptr;
  cu::CtxPopCurrent pop = nullptr;
  cu::Context context = nullptr;
  cu::Stream stream = nullptr;
};

Driver LoadDriver() {
  Driver d;
#if defined(__linux__)
  // RTLD_NOLOAD: only a driver MLX's CUDA backend has already loaded (its allocator made the
  // memory being copied into, so it has, on a CUDA device); the handle is never closed.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return d;
  auto prefetch = reinterpret_cast<cu::MemPrefetchAsync>(dlsym(lib, cu::kMemPrefetchAsyncSymbol));
  auto retain = reinterpret_cast<cu::DevicePrimaryCtxRetain>(dlsym(lib, cu::kDevicePrimaryCtxRetainSymbol));
  auto push = reinterpret_cast<cu::CtxPushCurrent>(dlsym(lib, cu::kCtxPushCurrentSymbol));
  auto pop = reinterpret_cast<cu::CtxPopCurrent>(dlsym(lib, cu::kCtxPopCurrentSymbol));
  auto create = reinterpret_cast<cu::StreamCreate>(dlsym(lib, cu::kStreamCreateSymbol));
  auto copy = reinterpret_cast<cu::MemcpyHtoD>(dlsym(lib, cu::kMemcpyHtoDSymbol));
  if (!prefetch || !retain || !push || !pop || !create || !copy) return d;
  cu::Context context = nullptr, popped = nullptr;
  if (retain(&context, 0) != 0 || !context || push(context) != 0) return d;
  cu::Stream stream = nullptr;
  const bool made = create(&stream, cu::kStreamNonBlocking) == 0 && stream;
  pop(&popped);
  if (!made) return d;
  d = {prefetch, copy, push, pop, context, stream};
#endif
  return d;
}

}  // namespace

bool PrefetchInputsEnabled() {
  // Only where MLX runs on a CUDA GPU: elsewhere another library's CUDA driver (PyTorch's, say)
  // may be loaded, and retaining its primary context would cost GPU memory for nothing.
  static const bool on =
      !EnvOff(env::kPrefetchInputs) && RuntimeDevice() == mx::Device(mx::Device::gpu) && MlxBuiltWithCuda();
  return on;
}

bool DriverCopiesInputs() {
  // The default (unset or "copy") since the thirtieth session's H200: the one Sum over a TinyLlama
  // decode step's attention mask, its first reader, took 1.7 us where it took 183-295 us reading
  // pages the host had written (the twenty-seventh and twenty-eighth sessions' H100s).
  static const bool on = PrefetchInputsEnabled() && EnvString(env::kPrefetchInputs, "copy") == "copy";
  return on;
}

const Driver& TheDriver() {
  static const Driver driver = LoadDriver();
  return driver;
}

bool CopyToGpu(void* dst, const void* src, size_t bytes) {
  if (!dst || !src || bytes == 0) return false;
  const Driver& driver = TheDriver();
  if (!driver.copy || driver.push(driver.context) != 0) return false;
  const bool done =
      driver.copy(static_cast<cu::DevicePtr>(reinterpret_cast<std::uintptr_t>(dst)), src, bytes) == 0;
  cu::Context popped = nullptr;
  driver.pop(&popped);
  return done;
}

bool PrefetchToGpu(const void* ptr, size_t bytes) {
  if (!ptr || bytes == 0) return false;
  const Driver& driver = TheDriver();
  if (!driver.prefetch) return false;
  // The calling thread (ORT's) need not have a current context: GPU 0's primary one, pushed for
  // the call and popped after it.
  if (driver.push(driver.context) != 0) return false;
  const cu::MemLocation gpu0{cu::kMemLocationTypeDevice, 0};
  const bool asked = driver.prefetch(static_cast<cu::DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr)), bytes,
                                     gpu0, 0, driver.stream) == 0;
  cu::Context popped = nullptr;
  driver.pop(&popped);
  return asked;
}

}  // namespace mlx_ep
